package zmq

import (
	"time"

	"github.com/velo-go/velo/ext"
)

// Key is the address key of the ZMQ transport, as the reference names it.
const Key ext.TransportKey = "zmq"

// DefaultListen is the endpoint bound when WithListen is not given, the
// reference's default: loopback, a port the kernel picks.
const DefaultListen = "tcp://127.0.0.1:0"

// Option configures the transport.
type Option func(*options)

type options struct {
	listen        string
	priority      int
	lanes         int
	channelBytes  int
	teardownGrace time.Duration
	maxFrameSize  int
	sendTimeout   time.Duration
	retry         time.Duration
}

// WithListen sets the endpoint the ROUTER socket binds: "tcp://host:port"
// (port 0 picks one) or "ipc:///path". The address entry holds the bound
// endpoint, so it must be one peers can reach: bind a routable host, not
// 0.0.0.0, when peers are on other machines.
func WithListen(endpoint string) Option { return func(o *options) { o.listen = endpoint } }

// WithPriority sets the priority used to pick a peer's primary transport
// (default 60: below TCP and gRPC, above NATS).
func WithPriority(p int) Option { return func(o *options) { o.priority = p } }

// WithLanes sets the number of DEALER sockets, each an ordered channel,
// kept to each peer (default 1).
func WithLanes(n int) Option { return func(o *options) { o.lanes = n } }

// WithChannelBytes bounds the send channel of one (peer, lane), in bytes
// (default 4 MiB). Sends beyond it wait in the admission gate.
func WithChannelBytes(n int) Option { return func(o *options) { o.channelBytes = n } }

// WithTeardownGrace bounds how long Shutdown keeps sending frames already
// admitted (default 1 s, the reference's linger). What is left after it,
// and a send still blocked on a peer that does not read, is reported
// failed.
func WithTeardownGrace(d time.Duration) Option { return func(o *options) { o.teardownGrace = d } }

// WithMaxFrameSize caps header plus payload of a frame, sent and received
// (default 16 MiB). The reference sets no cap; a larger inbound frame is
// dropped and counted as malformed.
func WithMaxFrameSize(n int) Option { return func(o *options) { o.maxFrameSize = n } }

// WithSendTimeout bounds how long a lane keeps dialling a peer that does
// not answer before it fails the frames queued for it (default 5 s, the
// reference's send timeout). The next frame dials again.
func WithSendTimeout(d time.Duration) Option { return func(o *options) { o.sendTimeout = d } }

// WithReconnectInterval sets the wait between two dial attempts
// (default 100 ms).
func WithReconnectInterval(d time.Duration) Option { return func(o *options) { o.retry = d } }

const (
	defaultPriority     = 60
	defaultChannelBytes = 4 << 20
	defaultGrace        = time.Second
	defaultMaxFrame     = 16 << 20
	defaultSendTimeout  = 5 * time.Second
	defaultRetry        = 100 * time.Millisecond
)

func (o *options) defaults() {
	if o.listen == "" {
		o.listen = DefaultListen
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
	if o.maxFrameSize <= 0 {
		o.maxFrameSize = defaultMaxFrame
	}
	if o.sendTimeout <= 0 {
		o.sendTimeout = defaultSendTimeout
	}
	if o.retry <= 0 {
		o.retry = defaultRetry
	}
}
