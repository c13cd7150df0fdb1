// Package rdmapath holds the parts of the rendezvous RDMA path that need
// no RDMA backend: the descriptor an owner sends in an Rdma acquire
// answer, the owner's eight checks that decide whether it sends one, the
// consumer's offer, and the consumer's fallback to the chunked path.
//
// The checks and the offer are pure functions over facts the caller
// gathers (from its configuration, from the slot, and from the Backend
// the future UCX transport will provide), so that the rendezvous manager
// makes each decision in one place and a backend plugs in without moving
// it. Each decision comes back with its reason, the label of
// velo_rendezvous_rdma_path_total.
package rdmapath
