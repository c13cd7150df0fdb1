package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgpeers"
)

// Key is the transport key of the simulated transport in a WorkerAddress.
const Key ext.TransportKey = "sim"

// Defaults of the options.
const (
	defaultChannelBytes = 8 << 20
	defaultGrace        = 2 * time.Second
	defaultMaxFrame     = 16 << 20
	defaultPriority     = 10
)

// Option configures a Transport.
type Option func(*options)

type options struct {
	name          string
	lanes         int
	channelBytes  int
	teardownGrace time.Duration
	maxFrameSize  int
	priority      int
}

// WithName names the transport's endpoint on its Net (its address entry);
// by default it is named after the instance it serves.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithLanes keeps n ordered lanes to each peer (default 1).
func WithLanes(n int) Option { return func(o *options) { o.lanes = n } }

// WithChannelBytes bounds the bytes admitted and not yet handed to the
// fabric on one lane (default 8 MiB): past it, Send returns a Pending
// admission.
func WithChannelBytes(n int) Option { return func(o *options) { o.channelBytes = n } }

// WithTeardownGrace is how long Shutdown keeps sending what was admitted
// (default 2 s).
func WithTeardownGrace(d time.Duration) Option { return func(o *options) { o.teardownGrace = d } }

// WithMaxFrameSize is the largest header plus payload sent (default
// 16 MiB).
func WithMaxFrameSize(n int) Option { return func(o *options) { o.maxFrameSize = n } }

// WithPriority orders the transport against others that reach a peer
// (default 10).
func WithPriority(p int) Option { return func(o *options) { o.priority = p } }

// Transport is a messenger transport over a Net: each frame is one
// message on the fabric, on its lane. Its lanes, admission gates and
// teardown are those of velo's message-oriented transports; the wire is
// the fabric, so latency, loss, reordering across lanes and partitions
// apply to it. The Net must be running (Net.Run) for frames to move.
type Transport struct {
	net *Net
	o   options
	id  ext.InstanceID

	ep   *Endpoint
	core msgpeers.Core

	mu       sync.Mutex
	byAddr   map[string]ext.InstanceID // registered peers by endpoint name
	reported map[ext.InstanceID]bool   // lost and reported once

	shutOnce sync.Once
	closed   chan struct{}
	echoes   atomic.Uint64
}

// New builds a transport on net; it attaches to net when started.
func New(net *Net, opts ...Option) *Transport {
	o := options{}
	for _, opt := range opts {
		opt(&o)
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
	if o.priority == 0 {
		o.priority = defaultPriority
	}
	t := &Transport{net: net, o: o, closed: make(chan struct{}), byAddr: map[string]ext.InstanceID{}, reported: map[ext.InstanceID]bool{}}
	t.core.Init(o.channelBytes)
	return t
}

// Key is "sim".
func (t *Transport) Key() ext.TransportKey { return Key }

// Priority orders transports when several reach a peer.
func (t *Transport) Priority() int { return t.o.priority }

// RetainsOwners is true: a queued frame keeps its Owner until the fabric
// has copied it.
func (t *Transport) RetainsOwners() bool { return true }

// BindInstance names the endpoint after id unless WithName named it.
func (t *Transport) BindInstance(id ext.InstanceID) { t.id = id }

// Endpoint is the transport's endpoint on its Net, once started.
func (t *Transport) Endpoint() *Endpoint { return t.ep }

// SetObservability installs the metrics handle.
func (t *Transport) SetObservability(o ext.Observability) { t.core.SetObservability(o) }

// Start attaches the transport to its Net and returns its endpoint name
// as the address entry.
func (t *Transport) Start(_ context.Context, adapter *ext.TransportAdapter) ([]byte, error) {
	if t.id == (ext.InstanceID{}) {
		t.id = ext.NewInstanceID()
	}
	name := t.o.name
	if name == "" {
		name = t.id.String()
	}
	t.core.SetAdapter(adapter)
	ep, err := t.net.Attach(name, t.recv)
	if err != nil {
		return nil, err
	}
	ep.OnPeerDown(t.peerDown)
	t.ep = ep
	t.core.MarkStarted()
	return []byte(name), nil
}

// recv takes one message from the fabric.
func (t *Transport) recv(src string, lane int, data []byte) {
	f, ok := decodeFrame(data)
	if !ok {
		return // nothing on the fabric writes a bad frame but a test
	}
	if t.core.Closing() {
		return // its listener is closed
	}
	if t.core.Deliver(f) {
		// The node drains: echo ShuttingDown to the sender, with the
		// request's header, as the socket transports answer on the
		// connection the request came on.
		t.echoes.Add(1)
		t.ep.Send(src, lane, encodeFrame(ext.Frame{Type: ext.ShuttingDown, Header: f.Header}), nil)
	}
}

// peerDown reports a registered peer whose endpoint died, once.
func (t *Transport) peerDown(name string) {
	if t.core.Closing() {
		return
	}
	t.mu.Lock()
	id, ok := t.byAddr[name]
	first := ok && !t.reported[id]
	if first {
		t.reported[id] = true
	}
	t.mu.Unlock()
	if first {
		t.core.Adapter().ReportPeerLost(id, fmt.Errorf("sim: endpoint %s died: %w", name, ext.ErrPeerUnreachable))
	}
}

// Register learns a peer's endpoint name from its "sim" entry.
func (t *Transport) Register(info ext.PeerInfo) error {
	ep, err := info.Address.Lookup(Key)
	if err != nil {
		return err
	}
	addr := string(ep)
	if err := t.core.Register(info.InstanceID, addr, t.o.lanes, func(l *msgpeers.Lane) msgpeers.Writer {
		return &laneWriter{t: t, l: l, addr: addr, abort: make(chan struct{})}
	}); err != nil {
		return err
	}
	t.mu.Lock()
	t.byAddr[addr] = info.InstanceID
	delete(t.reported, info.InstanceID)
	t.mu.Unlock()
	return nil
}

// Unregister forgets a peer; what is queued for it is reported failed.
func (t *Transport) Unregister(id ext.InstanceID) {
	t.core.Unregister(id)
	t.mu.Lock()
	for a, p := range t.byAddr {
		if p == id {
			delete(t.byAddr, a)
		}
	}
	t.mu.Unlock()
}

// Send sends on lane 0.
func (t *Transport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	return t.SendOnLane(target, 0, f)
}

// SendOnLane queues f on target's lane; a frame larger than
// MaxMessageSize is refused with an ext.FrameTooLargeError.
func (t *Transport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	return t.core.SendOnLane(target, lane, f, t.o.maxFrameSize)
}

// Lanes is the number of lanes kept to a registered peer, 0 for another.
func (t *Transport) Lanes(target ext.InstanceID) int { return t.core.Lanes(target) }

// LaneStats reports each lane to target (ext.LaneStatser): the frames
// and bytes handed to the fabric and what is queued. Nil for a peer not
// registered.
func (t *Transport) LaneStats(target ext.InstanceID) []ext.LaneStats {
	return t.core.LaneStats(target)
}

// MaxMessageSize is the largest header plus payload sent.
func (t *Transport) MaxMessageSize() int { return t.o.maxFrameSize }

// CheckHealth reports a peer reachable while its endpoint lives and no
// partition separates the two; otherwise the error matches
// ext.ErrPeerUnreachable.
func (t *Transport) CheckHealth(_ context.Context, target ext.InstanceID) error {
	addr, err := t.core.HealthAddr(target)
	if err != nil {
		return err
	}
	if err := t.net.Reachable(t.ep.name, addr); err != nil {
		return fmt.Errorf("sim: health of %v: %w: %w", target, ext.ErrPeerUnreachable, err)
	}
	return nil
}

// Shutdown stops receiving, hands the fabric what was admitted within the
// teardown grace, and reports the rest failed. It leaves the Net.
func (t *Transport) Shutdown() {
	t.shutOnce.Do(t.shutdown)
	<-t.closed
}

func (t *Transport) shutdown() {
	defer close(t.closed)
	end, started := t.core.BeginShutdown(t.o.teardownGrace)
	if !started {
		return
	}
	t.core.StopWriters()
	timer := time.AfterFunc(time.Until(end), t.core.AbortAll)
	t.core.WaitWriters()
	timer.Stop()
	t.ep.Leave()
}

// Closed is closed once Shutdown finished.
func (t *Transport) Closed() <-chan struct{} { return t.closed }

// Kill ends the transport as a crash would: its endpoint dies on the Net
// (peers that exchanged frames with it are told, and report it lost), and
// then it shuts down without a grace.
func (t *Transport) Kill() {
	t.net.Kill(t.ep.name)
	t.o.teardownGrace = time.Nanosecond
	t.Shutdown()
}

// laneWriter hands one lane's frames to the fabric.
type laneWriter struct {
	t         *Transport
	l         *msgpeers.Lane
	addr      string
	abort     chan struct{}
	abortOnce sync.Once
}

func (w *laneWriter) WriteAll(batch []ext.Frame) {
	t := w.t
	for i, f := range batch {
		batch[i] = ext.Frame{}
		var err error
		select {
		case <-w.l.Gone():
			err = ext.ErrConnectionClosed
		default:
			if t.core.PastGrace() {
				err = ext.ErrTransportClosed
			} else if serr := t.ep.Send(w.addr, w.l.Index(), encodeFrame(f), w.abort); serr != nil {
				err = fmt.Errorf("%w: %w", ext.ErrConnectionClosed, serr)
			}
		}
		if err != nil {
			w.l.Failed(f, err)
			continue
		}
		t.core.Observe().Frames(ext.Outbound, f.Type, ext.Accepted, 1, f.Len())
		f.Release()
	}
}

func (w *laneWriter) Abort() { w.abortOnce.Do(func() { close(w.abort) }) }

// A frame on the fabric: [u8 type][u32 BE header length][header][payload].
const frameHead = 5

func encodeFrame(f ext.Frame) []byte {
	b := make([]byte, frameHead, frameHead+len(f.Header)+len(f.Payload))
	b[0] = byte(f.Type)
	binary.BigEndian.PutUint32(b[1:], uint32(len(f.Header)))
	b = append(b, f.Header...)
	return append(b, f.Payload...)
}

// decodeFrame splits a fabric message into a frame that aliases data (the
// fabric hands each message over once and keeps nothing of it).
func decodeFrame(data []byte) (ext.Frame, bool) {
	if len(data) < frameHead {
		return ext.Frame{}, false
	}
	typ := ext.MessageType(data[0])
	h := int(binary.BigEndian.Uint32(data[1:]))
	if !typ.Valid() || h > len(data)-frameHead {
		return ext.Frame{}, false
	}
	return ext.Frame{Type: typ, Header: data[frameHead : frameHead+h], Payload: data[frameHead+h:]}, true
}
