// Package queue holds named work queues of typed items.
//
// A Backend owns named queues. NewSender and NewReceiver open a queue by name
// and give a typed handle: a Sender[T] puts items in, a Receiver[T] takes
// them out. Several senders and receivers may share one queue; each item
// goes to one receiver (competing consumers).
//
// Items travel as MessagePack, as in the Rust reference: a struct is a
// MessagePack array of its fields in declaration order, and integers take
// their smallest form. See Marshal.
//
// A received Item is acknowledged with Ack once it is done. What happens to
// an item that is never acknowledged depends on the backend: the memory
// backend forgets it, the messenger and JetStream backends deliver it again
// after their ack wait. The package documentation of each backend states
// its promise; docs/queues.md compares them.
//
// Backends live in sub-packages: memqueue (in process, for tests), msgqueue
// (an actor on one velo node, reached with active messages) and jsqueue
// (NATS JetStream with WorkQueue retention). queuetest is the behavioural
// suite that every backend passes.
package queue
