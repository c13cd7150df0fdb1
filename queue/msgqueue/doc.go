// Package msgqueue is the queue backend on the messenger: one node owns the
// queues in an actor (Service), and other nodes reach it with active
// messages to the handler "velo.queue.rpc", as in the Rust reference.
//
// Promise: items of one producer leave in the order sent. Each queue holds
// at most its capacity, counting items leased and not yet acknowledged:
// TrySend fails with queue.ErrFull, Send asks again until there is room.
// (The reference drops the oldest item when full; this actor refuses the
// new one instead, and a Rust sender sees the answer "Full" as an error.)
// A receiver leases an item; if it does not Ack within the ack wait (it
// crashed, or closed its handle), the owner puts the item back at the
// head for another receiver, so a receiver crash loses nothing. Items live
// in the owner's memory: if the owner stops, its queues are gone. Closing a
// sender ends only that handle.
package msgqueue
