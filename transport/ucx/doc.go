// Package ucx is the UCX messenger transport: frames between nodes travel
// as UCX Active Messages, over InfiniBand or RoCE where UCX finds them and
// over TCP or shared memory elsewhere, and the same endpoints serve the
// one-sided GETs of the rendezvous RDMA path (Transport.RDMA).
//
// # Building
//
// The transport needs cgo and UCX (libucp), so it is built only with the
// ucx build tag:
//
//	apt-get install libucx-dev       # UCX 1.13 or later, headers in /usr/include/ucp
//	go build -tags ucx ./...
//	UCX_TLS=tcp go test -tags ucx ./transport/ucx/
//
// Without the tag the package still compiles (with CGO_ENABLED=0 too), and
// New returns an error that matches ErrNotBuilt.
//
//	tr, err := ucx.New(ucx.WithEagerEndpoints(true))
//	node, err := velo.New(ctx, velo.WithTransport(tcpTransport), velo.WithTransport(tr))
//
// # Runtime settings
//
// UCX reads its UCX_* variables from the environment, and the environment
// wins: WithTLS and WithNetDevices set UCX_TLS and UCX_NET_DEVICES only
// where the environment sets none. Pin both on RDMA hardware (for example
// UCX_TLS=rc_mlx5,ud_mlx5,self and UCX_NET_DEVICES=mlx5_0:1; an RC-only
// list cannot wire up). UCX_TLS=tcp needs no hardware and is what the
// tests use. UCX 1.13's shared-memory transports (UCX_TLS=sm,self) have no
// peer error handling: when the UCX_TLS in force names only those, the
// transport creates its endpoints without it (as WithoutPeerErrors asks),
// and no peer is then reported lost.
//
// # How it works
//
// There is no listener. The transport's address entry (key "ucx") holds
// the packed UCX worker address with the wire version, velo's Active
// Message id base (0x5645), the largest frame the node takes (WithEagerMax,
// 1 MiB by default, at most 16 MiB) and a random incarnation, drawn at
// every start. Register only decodes it; the endpoint is created at the
// first frame to the peer (or at Register, in the background, with
// WithEagerEndpoints), and again after UCX failed it.
//
// Each (peer, lane) has an admission gate and a writer goroutine, so order
// holds per lane; all lanes of a peer share its endpoint. Every frame is
// one eager Active Message whose header starts with the sender's 8-byte
// incarnation; a frame over the limit to that peer (the smaller of both
// sides' WithEagerMax) is refused at Send with ext.ErrFrameTooLarge, and
// larger payloads go through the node's rendezvous staging. UCX keeps a
// frame's bytes until its send completes; what a lane has posted and UCX
// not completed is bounded by WithChannelBytes, so a receiver that stops
// reading fills its senders' lanes and their sends wait in the gates.
//
// One worker per transport runs on a progress goroutine locked to an OS
// thread. Its Active Message handlers only copy each frame into a bounded
// inbox (16 MiB); one delivery goroutine hands the frames to the node.
// When the node stops taking frames the inbox fills and the progress
// goroutine waits, which is how a UCX receiver pushes back: the whole
// worker then stalls for every peer, and a stall longer than UCX's
// keepalive (about 20 s) fails the peers' endpoints to this node.
//
// When UCX fails an endpoint (the peer's process died, its connection
// broke), the peer is reported lost at once, matching ext.ErrPeerUnreachable,
// and what waits on it fails; the next frame creates a new endpoint.
// CheckHealth is a ping and pong on the peer's endpoint. A node drained by
// a shutdown answers each refused request with a ShuttingDown echo; to
// answer a sender it never registered, it uses the hello that every
// endpoint carries first (the sender's own address entry).
//
// # The endpoint idle reaper
//
// WithEndpointIdleTimeout(d) closes endpoints that nothing used for d. It
// is off by default; values below 500 ms count as 500 ms. Our sends, GETs,
// pings and eager wireups count as uses, and so does every frame the peer
// sends us. An endpoint with a send or a GET outstanding is never closed,
// and the completion of the last one restarts its clock. Endpoints are
// scanned every half timeout, at least once a second, so one closes
// between one timeout and one timeout plus one scan period after its last
// use. The peer stays registered and the next use creates a new endpoint.
//
// The reaper can cost the peer. UCX pairs endpoints by worker: in the Rust
// implementation of velo, after one side closed its endpoint the peer's
// next Messages (and, by the same mechanism, its pings) to it were lost
// silently, with no error at either end, until UCX's keepalive (about
// 20 s) failed the peer's endpoint. That implementation sends requests
// with UCX's reply flag; this transport sends none, and over UCX_TLS=tcp with
// UCX 1.13 the peer's frames still arrive after a reap
// (TestReapedEndpointPeerStillReachesUs). Other UCX transports and
// versions are not measured: plan for the loss, and use the reaper for
// peers idle in both directions, not for peers this node only probes.
//
// # Version compatibility
//
// The UCX wire version is 2 (BlobVersion): every frame header starts with
// the sender's incarnation, which the reaper needs to tell who sent a
// frame. The Rust reference 0.9 speaks version 1. Register refuses an
// entry of another version with an error that matches ErrVersionMismatch
// and names both versions; all UCX peers must run the same version, and
// during a mixed rollout they reach each other over their other
// transports only.
package ucx
