package ucx

import (
	"fmt"
	"os"
	"time"

	ucxtls "github.com/velo-go/velo/internal/ucx"

	"github.com/velo-go/velo/ext"
)

// Key is the address key of the UCX transport, as the reference names it.
const Key ext.TransportKey = "ucx"

// Option configures the transport.
type Option func(*options)

type options struct {
	eagerMax      int
	eagerEPs      bool
	idleTimeout   time.Duration
	tls           string
	netDevices    string
	spin          time.Duration
	priority      int
	lanes         int
	channelBytes  int
	teardownGrace time.Duration
	inboxBytes    int
	noPeerErrors  bool
	allocArenas   bool
}

// Defaults and bounds.
const (
	// DefaultEagerMax is the largest header plus payload sent in one
	// Active Message unless WithEagerMax says otherwise.
	DefaultEagerMax = 1 << 20
	// MaxEagerMax is the ceiling of WithEagerMax, the TCP codec's frame cap.
	MaxEagerMax = 16 << 20
	// MinIdleTimeout is the floor of WithEndpointIdleTimeout.
	MinIdleTimeout = 500 * time.Millisecond

	minEagerMax         = 4 << 10
	defaultPriority     = 80
	defaultChannelBytes = 4 << 20
	defaultGrace        = time.Second
	defaultInboxBytes   = 16 << 20
)

// WithEagerMax sets the largest header plus payload of one frame, in
// bytes (default 1 MiB, at most 16 MiB). Every frame is one eager Active
// Message; a larger payload goes through the node's rendezvous staging,
// never through UCX's own rendezvous protocol. The limit to a peer is the
// smaller of its value and ours.
func WithEagerMax(n int) Option { return func(o *options) { o.eagerMax = n } }

// WithEagerEndpoints creates a peer's endpoint when it is registered
// instead of at its first use (default off), so that the first frame or
// GET to it does not pay UCX's wireup. Register does not wait for it; an
// endpoint that cannot be created then is created at first use.
func WithEagerEndpoints(on bool) Option { return func(o *options) { o.eagerEPs = on } }

// WithEndpointIdleTimeout closes an endpoint that nothing used for d
// (default 0: never). Values below 500 ms count as 500 ms. Read the
// package documentation first: a closed endpoint costs the peer its next
// Messages to this node, silently, until UCX's keepalive fails the peer's
// own endpoint.
func WithEndpointIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = d } }

// WithTLS sets UCX_TLS, the list of UCX transports (for example "tcp", or
// "rc_mlx5,ud_mlx5,self"), for when the environment sets none: the
// environment wins.
func WithTLS(tls string) Option { return func(o *options) { o.tls = tls } }

// WithNetDevices sets UCX_NET_DEVICES (for example "mlx5_0:1") for when
// the environment sets none: the environment wins.
func WithNetDevices(devices string) Option { return func(o *options) { o.netDevices = devices } }

// WithSpin sets how long the progress goroutine polls after its last
// activity before it parks (default 20 µs). Longer spins cut the wake-up
// cost of a busy link and burn a core while idle.
func WithSpin(d time.Duration) Option { return func(o *options) { o.spin = d } }

// WithPriority sets the priority used to pick a peer's primary transport
// (default 80: below TCP, so a peer that has both is reached over TCP and
// UCX serves the rendezvous GETs beside it).
func WithPriority(p int) Option { return func(o *options) { o.priority = p } }

// WithLanes sets the number of ordered channels kept to each peer
// (default 1). All of them share the peer's one endpoint.
func WithLanes(n int) Option { return func(o *options) { o.lanes = n } }

// WithChannelBytes bounds the send channel of one (peer, lane), in bytes
// (default 4 MiB), and as much again what the lane has posted to UCX and
// UCX has not completed. Sends beyond it wait in the admission gate.
func WithChannelBytes(n int) Option { return func(o *options) { o.channelBytes = n } }

// WithTeardownGrace bounds how long Shutdown keeps sending frames already
// admitted (default 1 s). What is left after it is reported failed.
func WithTeardownGrace(d time.Duration) Option { return func(o *options) { o.teardownGrace = d } }

// WithoutPeerErrors creates endpoints without UCX's peer error handling.
// UCX 1.13's shared-memory transports (UCX_TLS=sm,self) have none, so
// endpoints over them can be created only so, and the transport turns it
// on by itself when the UCX_TLS in force (the environment's, else
// WithTLS's) names only those. The price is that a dead peer is never
// detected (nothing is reported lost, and what waits on it waits for its
// own deadline, or for a TCP transport beside it to see the loss).
func WithoutPeerErrors() Option { return func(o *options) { o.noPeerErrors = true } }

// peerErrorsOff reports whether endpoints go without peer error handling:
// asked for, or forced by a UCX_TLS that names only shared memory (the
// environment's wins over WithTLS, as in UCX).
func (o *options) peerErrorsOff() bool {
	tls := os.Getenv("UCX_TLS")
	if tls == "" {
		tls = o.tls
	}
	return o.noPeerErrors || ucxtls.SharedMemoryOnly(tls)
}

// WithAllocatedArenas makes the RDMA registry's arenas memory that UCX
// allocates (UCP_MEM_MAP_ALLOCATE) rather than memory velo maps and UCX
// registers. Over UCX's shared-memory transports that is what makes a GET
// one-sided: the consumer attaches the owner's segment and copies out of
// it, and the owner spends nothing (registered memory is read there by an
// emulation the owner's progress goroutine answers). The price is the
// attach: a key is unpacked for one GET only, so every GET maps the
// segment afresh and faults its pages in, about 2.5 µs per 4 KiB page on
// the machine measured. On InfiniBand or RoCE both kinds are registered
// with the NIC and read one-sided alike.
func WithAllocatedArenas() Option { return func(o *options) { o.allocArenas = true } }

func (o *options) defaults() error {
	switch {
	case o.eagerMax == 0:
		o.eagerMax = DefaultEagerMax
	case o.eagerMax < minEagerMax || o.eagerMax > MaxEagerMax:
		return fmt.Errorf("ucx: WithEagerMax(%d): want %d to %d bytes", o.eagerMax, minEagerMax, MaxEagerMax)
	}
	switch {
	case o.idleTimeout < 0:
		return fmt.Errorf("ucx: WithEndpointIdleTimeout(%v) is negative", o.idleTimeout)
	case o.idleTimeout > 0 && o.idleTimeout < MinIdleTimeout:
		o.idleTimeout = MinIdleTimeout
	}
	if o.spin < 0 {
		return fmt.Errorf("ucx: WithSpin(%v) is negative", o.spin)
	}
	if o.priority == 0 {
		o.priority = defaultPriority
	}
	if o.lanes <= 0 {
		o.lanes = 1
	}
	if o.channelBytes <= 0 {
		o.channelBytes = defaultChannelBytes
	}
	if o.teardownGrace <= 0 {
		o.teardownGrace = defaultGrace
	}
	if o.inboxBytes <= 0 {
		o.inboxBytes = defaultInboxBytes
	}
	return nil
}
