package nats

import (
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/velo-go/velo/ext"
)

// Key is the address key of the NATS transport, as the reference names it.
const Key ext.TransportKey = "nats"

// DefaultClusterID is the first token of every subject when WithClusterID
// is not given. The reference has no default (its builder takes the
// cluster id as an argument); nodes of one deployment must agree on it,
// whatever it is.
const DefaultClusterID = "velo"

// Option configures the transport.
type Option func(*options)

type options struct {
	conn          *natsgo.Conn
	url           string
	natsOpts      []natsgo.Option
	cluster       string
	priority      int
	lanes         int
	channelBytes  int
	teardownGrace time.Duration
	maxFrameSize  int
}

// WithConn makes the transport use nc, a connection the caller owns: the
// transport subscribes and publishes on it, and its Shutdown unsubscribes
// and flushes but leaves nc open. Reconnects are nc's, as the caller
// configured them. It wins over WithURL.
func WithConn(nc *natsgo.Conn) Option { return func(o *options) { o.conn = nc } }

// WithURL makes the transport connect to url (a nats.go server list:
// "nats://host:4222", comma-separated for several) when it starts, and
// close that connection at Shutdown. The connection reconnects forever,
// every quarter second with jitter, buffering up to 8 MiB of frames while
// the server is away; opts are applied after those defaults, so they can
// change them (credentials, TLS, other reconnect settings).
func WithURL(url string, opts ...natsgo.Option) Option {
	return func(o *options) { o.url, o.natsOpts = url, opts }
}

// WithClusterID sets the first token of the subjects (default
// DefaultClusterID). Nodes reach each other only within one cluster id.
func WithClusterID(id string) Option { return func(o *options) { o.cluster = id } }

// WithPriority sets the priority used to pick a peer's primary transport
// (default 50: a peer that also has TCP is reached over TCP).
func WithPriority(p int) Option { return func(o *options) { o.priority = p } }

// WithLanes sets the number of ordered channels kept to each peer
// (default 1). All of them publish to the peer's one subject on the one
// connection; lanes keep a send that waits on one lane's full channel
// from holding back the others.
func WithLanes(n int) Option { return func(o *options) { o.lanes = n } }

// WithChannelBytes bounds the send channel of one (peer, lane), in bytes
// (default 4 MiB). Sends beyond it wait in the admission gate.
func WithChannelBytes(n int) Option { return func(o *options) { o.channelBytes = n } }

// WithTeardownGrace bounds how long Shutdown keeps publishing frames
// already admitted, and then flushing them to the server (default 1 s).
// What is left after it is reported failed.
func WithTeardownGrace(d time.Duration) Option { return func(o *options) { o.teardownGrace = d } }

// WithMaxFrameSize caps header plus payload of a frame below what the
// server allows (its max_payload less 64 bytes for the NATS headers and
// subject).
func WithMaxFrameSize(n int) Option { return func(o *options) { o.maxFrameSize = n } }

const (
	defaultPriority     = 50
	defaultChannelBytes = 4 << 20
	defaultGrace        = time.Second
	// natsOverhead is what the reference charges against the server's
	// max_payload for the Velo-Type and Velo-HLen headers, the subject and
	// the command, since max_payload bounds the whole HPUB.
	natsOverhead = 64
)

func (o *options) defaults() {
	if o.cluster == "" {
		o.cluster = DefaultClusterID
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
}

// connect dials url with the transport's reconnect defaults.
func connect(url string, extra []natsgo.Option) (*natsgo.Conn, error) {
	opts := []natsgo.Option{
		natsgo.Name("velo"),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250 * time.Millisecond),
		natsgo.ReconnectJitter(100*time.Millisecond, time.Second),
		natsgo.ReconnectBufSize(8 << 20),
		natsgo.RetryOnFailedConnect(false),
	}
	return natsgo.Connect(url, append(opts, extra...)...)
}
