// Package deadline is a queue of deadlines for many entries, served by one
// goroutine and one timer.
//
// It is for things that must end if nothing happens to them in time, and
// that are many: an unattached stream anchor waiting for its sender (the
// target load is 200,000 of them), a bind waiting to be claimed. Giving each
// of them a goroutine or a timer costs memory and scheduler work for every
// entry; this queue costs a map slot and a heap slot per entry (about 42
// bytes with 200,000 entries) and one goroutine in all.
//
// How it behaves:
//
//   - An entry is a key (a uint64 chosen by the caller) and a deadline.
//     Add puts it in the queue, or moves its deadline if it is already
//     there. Reset moves the deadline of an entry still in the queue, later
//     (a renewal) or earlier; it does nothing for a key that has gone.
//     Remove takes it out, for example when the anchor attaches or closes.
//   - When the deadline of an entry has passed, the queue takes the entry
//     out and calls onExpire(key), once. It never calls it before the
//     deadline, never twice, and never after Remove has reported true.
//     Remove reports false for a key that the queue has already taken out
//     to expire, so the caller always knows which of the two happened.
//   - onExpire runs on the sweeper goroutine with no lock held, so it may
//     call Add, Reset and Remove. It should be short: later expiries wait
//     for it. It must not call Close.
//   - Forever (the zero time.Time) is a deadline that never comes. Such an
//     entry sits in its shard's map only, until it is given a deadline or
//     removed.
//   - The entries are split into shards (16 by default), each with its own
//     lock, so goroutines that add and remove different keys rarely wait
//     for each other. Add, Reset and Remove cost O(log n) in the shard's
//     size and allocate nothing once the shard has grown.
//   - The sweeper sleeps until the earliest deadline in the whole queue.
//     Entries far in the future cost it nothing. When an Add or Reset brings
//     a deadline earlier than the one it sleeps for, it is woken to re-arm
//     its timer; otherwise adding costs it no wake-up. Removing or
//     postponing the earliest entry can cost one wake-up that finds nothing
//     due.
//   - Deadlines are measured on the monotonic clock when they come from
//     time.Now().Add(d), so a change of the wall clock moves no deadline.
//   - Close stops the sweeper and waits for it to return, including any
//     onExpire call in progress. After Close returns, no onExpire runs;
//     entries still in the queue never expire.
package deadline
