// Command rdma moves a payload between two processes by rendezvous over
// the RDMA path: an owner stages it in registered memory
// (RegisterDataPinned), a consumer reads it with one UCX GET, and TCP
// beside UCX carries the control plane. It needs the ucx build tag and
// Debian's libucx-dev:
//
//	UCX_TLS=tcp go run -tags ucx ./examples/rdma
//	UCX_TLS=sm,self go run -tags ucx ./examples/rdma --size 67108864
//
// With no --role it starts an owner and a consumer as child processes of
// itself; the owner prints its peer card (PeerInfo and the handle) as one
// JSON line, which the parent hands to the consumer. The consumer checks
// every byte and exits non-zero unless its velo_rendezvous_rdma_path_total
// counted the GET (path="rdma", reason="ok"): the chunked path returns the
// same bytes, so only the metric proves the RDMA path ran.
package main
