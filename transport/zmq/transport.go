package zmq

import (
	"context"
	"fmt"
	"io"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgpeers"
)

// healthTimeout bounds a health check whose context has no deadline.
const healthTimeout = 5 * time.Second

// quiet is the logger given to zmq4, which otherwise prints a line per
// connection it fails to open.
var quiet = log.New(io.Discard, "", 0)

// Transport is the ZMQ messenger transport: one ROUTER end that receives
// (a listener with a goroutine per DEALER connection), one DEALER socket
// per (peer, lane) that sends.
type Transport struct {
	o        options
	id       ext.InstanceID
	bound    bool
	endpoint string

	router *router
	ctx    context.Context // ends when the teardown grace does
	cancel context.CancelFunc

	// core is the peer table, the lanes and the teardown grace, shared
	// with transport/nats; its writers are the lane writers and the
	// DEALER readers. The sockets are this package's (lane.go).
	core msgpeers.Core

	shutOnce sync.Once
	closed   chan struct{}

	malformed atomic.Uint64
	dials     atomic.Uint64
}

// Stats counts what the transport refused or lost.
type Stats struct {
	// Malformed inbound messages: not [type, header, payload] after the
	// sender's identity (on either end), a type part that is not one known byte, or a frame above
	// the size cap. Each is dropped.
	Malformed uint64
	// DrainRefused requests refused because the node drains; each was
	// echoed ShuttingDown to the DEALER that sent it.
	DrainRefused uint64
	// SendFailed frames were admitted but not sent (unregister, shutdown
	// past its grace, a peer not reached within the send timeout, a send
	// error).
	SendFailed uint64
	// RouteFailed inbound frames found the node stopped.
	RouteFailed uint64
	// Dials counts DEALER connections made: the first to each (peer,
	// lane), then one per reconnect.
	Dials uint64
}

// New builds a ZMQ transport. It binds its ROUTER socket when the node
// starts it.
func New(opts ...Option) (*Transport, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	o.defaults()
	if !validEndpoint(o.listen) {
		return nil, fmt.Errorf("zmq: listen endpoint %q: only tcp:// and ipc:// are supported", o.listen)
	}
	t := &Transport{o: o, closed: make(chan struct{})}
	t.core.Init(o.channelBytes)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// Key is "zmq".
func (t *Transport) Key() ext.TransportKey { return Key }

// Priority orders transports when several reach a peer (default 60).
func (t *Transport) Priority() int { return t.o.priority }

// RetainsOwners is true: a queued frame keeps its Owner until sent.
func (t *Transport) RetainsOwners() bool { return true }

// BindInstance sets the identity of the DEALER sockets; the node calls it
// before Start. Without it the transport draws an id of its own.
func (t *Transport) BindInstance(id ext.InstanceID) { t.id, t.bound = id, true }

// Endpoint is the bound ROUTER endpoint, once started.
func (t *Transport) Endpoint() string { return t.endpoint }

// SetObservability installs the metrics handle.
func (t *Transport) SetObservability(o ext.Observability) { t.core.SetObservability(o) }

func (t *Transport) observe() ext.Observability { return t.core.Observe() }

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{
		Malformed:    t.malformed.Load(),
		DrainRefused: t.core.DrainRefused(),
		SendFailed:   t.core.SendFailed(),
		RouteFailed:  t.core.RouteFailed(),
		Dials:        t.dials.Load(),
	}
}

// Start binds the ROUTER socket and returns the bound endpoint as the
// address entry. The socket accepts before Start returns.
func (t *Transport) Start(ctx context.Context, adapter *ext.TransportAdapter) ([]byte, error) {
	if !t.bound {
		t.id = ext.NewInstanceID()
	}
	t.core.SetAdapter(adapter)
	r, err := listen(t.o.listen, t.o.maxFrameSize, t.onMsg)
	if err != nil {
		return nil, fmt.Errorf("zmq: bind %s: %w", t.o.listen, err)
	}
	t.router = r
	t.endpoint = boundEndpoint(t.o.listen, r.addr())
	t.core.MarkStarted()
	return []byte(t.endpoint), nil
}

// onMsg takes one inbound multipart message. zmq4 reads each part into
// its own allocation, so the frame needs no owner.
func (t *Transport) onMsg(c *zmq4.Conn, parts [][]byte) {
	f, ok := parseParts(parts, t.o.maxFrameSize)
	if !ok {
		t.malformed.Add(1)
		t.observe().Rejection(ext.RejectMalformed)
		return
	}
	if t.core.Deliver(f) {
		// The ROUTER answers the DEALER that sent the request, as the
		// reference does; a lost echo leaves the caller to its deadline.
		c.SendMsg(zmq4.NewMsgFrom(echoParts(f.Header)...))
	}
}

// Register learns a peer's ROUTER endpoint from its "zmq" entry. Its
// DEALER sockets dial when the first frame for them is queued.
func (t *Transport) Register(info ext.PeerInfo) error {
	ep, err := info.Address.Lookup(Key)
	if err != nil {
		return err
	}
	endpoint := string(ep)
	if !validEndpoint(endpoint) {
		return fmt.Errorf("zmq: peer %v: invalid endpoint %q (only tcp:// and ipc://)", info.InstanceID, endpoint)
	}
	return t.core.Register(info.InstanceID, endpoint, t.o.lanes, func(l *msgpeers.Lane) msgpeers.Writer {
		return newLane(t, l, endpoint)
	})
}

// Unregister forgets a peer; what is queued for it is reported failed and
// its DEALER sockets close.
func (t *Transport) Unregister(id ext.InstanceID) { t.core.Unregister(id) }

// Send sends on lane 0.
func (t *Transport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	return t.SendOnLane(target, 0, f)
}

// SendOnLane queues f for target's DEALER socket of that lane. A frame
// larger than MaxMessageSize is refused here with an ext.FrameTooLargeError.
func (t *Transport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	return t.core.SendOnLane(target, lane, f, t.o.maxFrameSize)
}

// Lanes is the number of lanes kept to a registered peer, 0 for another.
func (t *Transport) Lanes(target ext.InstanceID) int { return t.core.Lanes(target) }

// LaneStats reports each lane to target (ext.LaneStatser): whether its
// DEALER socket is connected, the peer's endpoint, the frames and bytes
// (headers and payloads) sent and what is queued. Nil for a peer not
// registered.
func (t *Transport) LaneStats(target ext.InstanceID) []ext.LaneStats {
	return t.core.LaneStats(target)
}

// MaxMessageSize is the largest header plus payload sent or accepted
// (WithMaxFrameSize, 16 MiB by default).
func (t *Transport) MaxMessageSize() int { return t.o.maxFrameSize }

// CheckHealth connects a probe DEALER to the peer's endpoint and reports
// it healthy once the ZMTP handshake completes, as the reference waits for
// its probe's CONNECTED event. A failure, or no answer until ctx ends (5 s
// when ctx has no deadline), matches ext.ErrPeerUnreachable.
func (t *Transport) CheckHealth(ctx context.Context, target ext.InstanceID) error {
	endpoint, err := t.core.HealthAddr(target)
	if err != nil {
		return err
	}
	ctx, cancel := msgpeers.WithDefaultTimeout(ctx, healthTimeout)
	defer cancel()
	probe := zmq4.NewDealer(ctx, zmq4.WithLogger(quiet), zmq4.WithDialerMaxRetries(0))
	defer probe.Close()
	done := make(chan error, 1)
	go func() { done <- probe.Dial(guardedEndpoint(endpoint, t.o.maxFrameSize)) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("zmq: health of %v: %w: %w", target, ext.ErrPeerUnreachable, err)
	}
	return nil
}

// Shutdown stops receiving (the listener and every inbound connection
// close), sends what was admitted
// within the teardown grace, then closes every DEALER socket, which ends
// a send blocked on a peer that does not read, and reports what is left
// failed. It returns when done; Closed is closed then.
func (t *Transport) Shutdown() {
	t.shutOnce.Do(t.shutdown)
	<-t.closed
}

func (t *Transport) shutdown() {
	defer close(t.closed)
	end, started := t.core.BeginShutdown(t.o.teardownGrace)
	if !started {
		t.cancel()
		return
	}
	t.router.close()
	t.core.StopWriters()
	timer := time.AfterFunc(time.Until(end), t.abortAll)
	t.core.WaitWriters()
	timer.Stop()
	t.cancel()
}

// abortAll ends the teardown grace: every lane's socket closes, so a send
// still under way returns and its frame is reported failed.
func (t *Transport) abortAll() {
	t.cancel()
	t.core.AbortAll()
}

// Closed is closed once Shutdown finished.
func (t *Transport) Closed() <-chan struct{} { return t.closed }
