// Package ucx is velo's binding to UCX (the ucp API of UCX 1.13 and
// later): Active Messages for the messenger transport, and memory mapping,
// packed remote keys and one-sided GETs for the rendezvous RDMA path.
//
// The binding is cgo and builds only with the ucx build tag (go build
// -tags ucx) against libucx-dev; without the tag this package holds only
// its errors and the packed-key pre-parse.
//
// # Threading
//
// A Worker is one ucp_context and one ucp_worker in UCS_THREAD_MODE_SINGLE,
// owned by one progress goroutine locked to its OS thread. No UCX handle
// leaves that goroutine: every method queues a command on a bounded ring
// that the goroutine drains. After its last activity it spins for
// Config.Spin, polling UCX and the ring, then arms the worker and parks in
// poll(2) on the worker's fd and an eventfd that submitters write only
// while it is parked, with a 100 ms backstop.
//
// Active Message handlers and send completions (done functions) run on
// the progress thread. They must not block; they may call SendAM (which
// never waits there), but calls that wait for the progress thread (Connect,
// Map, Unmap, Get, Close) return ErrProgressThread there. OnEndpointError
// functions run on a goroutine of their own.
//
// # Operations own their buffers
//
// A posted send or GET keeps its Go buffers pinned (runtime.Pinner) until
// UCX completes it; the C side knows it only by an integer id. Each of
// ucp_am_send_nbx's three exits (inline completion, a request whose
// callback fires once, an error) answers the operation exactly once.
// Every send is eager (UCP_AM_SEND_FLAG_EAGER); a rendezvous-mode receive
// is refused. GETs post with UCP_OP_ATTR_FLAG_NO_IMM_CMPL, and their key
// is unpacked just before and destroyed in the completion.
//
// Close answers everything: what the bounded drain does not complete is
// cancelled or answered ErrClosed before the worker is destroyed. Buffers
// of an operation UCX never completed stay pinned until then.
//
// # Remote keys
//
// UCX's ucp_ep_rkey_unpack takes no length. Before a key reaches it, Get
// refuses an empty key or one over MaxRkeyLen (1024 bytes, also checked
// when packing), and checks the key's framing as ucp_rkey_pack lays it out
// (memory-domain map, memory type, one sized entry per domain, an optional
// device trailer), so UCX's parse stays inside the bytes; the copy handed
// to UCX is padded with 0xFF. The framing check cannot tell a stale key
// from a live one.
//
// # UCX 1.13 facts the binding lives with
//
// UCX 1.13's shared-memory transports have no peer failure handler:
// with UCX_TLS=sm,self, Connect fails unless Config.NoPeerErrors is set,
// and then a lost peer is never detected.
//
// Over tcp, which has no native RMA lane, UCX emulates a GET with Active
// Messages that the owner's worker answers. If the consumer's endpoint
// fails while the owner answers such a request, UCX 1.13 aborts the
// owner's process (ucs_fatal "unexpected error: Endpoint timeout" in
// ucp_get_req_handler). The binding cannot intercept it: an owner over
// tcp is exposed while a consumer that dies has GETs in flight to it.
//
// A Close that gives up on operations (a hung peer) leaves their UCX
// requests and keys to ucp_worker_destroy, which frees them and warns
// that objects were not returned to its memory pools.
//
// UCX_MEM_EVENTS is read when libucm loads; the binding does not set it.
//
// # What this package does not do
//
// Unmap cannot see a peer's GETs into the region, so it does not wait for
// them; it waits only for this worker's GETs whose destination lies in the
// region. A GET's remote range is not checked against the peer's region
// (the peer's Mem length is not in the key); callers check it against the
// descriptor they were given. Over shared memory with peer error handling
// UCX 1.13 may emulate RMA over Active Messages, which completes only
// while the owner's worker progresses (a Worker always does, until Close).
package ucx
