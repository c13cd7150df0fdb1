package streaming

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
	"github.com/velo-go/velo/streaming/internal/streamerr"
	"github.com/velo-go/velo/transport/tcp"
)

// Streams between workers (lib/velo/src/streaming/control.rs and
// tcp_transport.rs of the reference).
//
// The producer asks the anchor's owner with _anchor_attach (JSON bodies
// from package wire), offering the transport keys it can connect on:
// "messenger-mux-v2" first when its mux is on, then "tcp-stream". An owner
// with the mux answers the mux when offered (mux_attach.go); otherwise it
// binds the stream on its per-stream TCP listener and answers "tcp-stream"
// and a routing session id. This file is that per-stream path.
// The producer then opens one TCP connection for the stream, writes the
// 16-byte preamble (anchor local id, routing session id) and the stream
// frames as messenger frames with an empty header. The owner's reader
// feeds them into the anchor's inlet, the one the same-worker path fills.
//
// The listener's address is not in the attach answer: as in the
// reference, it is an entry of the owner's WorkerAddress under
// "tcp-stream", in the format of the messenger TCP transport's entry. The
// producer reads it from the PeerInfo it registered for the owner.

// AcceptWindow is how long a stream bound by _anchor_attach on the
// per-stream path waits for its producer's connection (the reference's
// fixed ACCEPT_TIMEOUT). After it the anchor sees ErrSenderDropped. A mux
// bind waits ReservationConfig.AcceptWindow instead.
const AcceptWindow = 60 * time.Second

// preambleTimeout bounds how long a connection may take to send its
// preamble (the reference's TOKEN_READ_TIMEOUT); it also bounds the dial.
const preambleTimeout = 20 * time.Second

// defaultHeartbeatInterval is the heartbeat interval this node answers an
// attach with unless WithHeartbeatInterval says otherwise: the producer
// beats at it, and the stream's reader ends a stream silent for
// detectionMultiplier of them (see heartbeat.go).
const defaultHeartbeatInterval = wire.DefaultHeartbeatIntervalMS * time.Millisecond

// ItemTooLargeError is returned by a send on a stream between workers for
// an item whose frame is larger than Limit: 16 MiB on
// the per-stream path, 1 KiB less over the mux (room for the batch around
// the record). Nothing is sent and the stream goes on.
type ItemTooLargeError = streamerr.ItemTooLargeError

type nodeConfig struct {
	mux          MuxConfig
	muxOnly      bool
	listen       string
	acceptWindow time.Duration
	heartbeat    time.Duration
	res          ReservationConfig
	log          *slog.Logger
	metrics      *metrics.VeloMetrics
	streams      streamNet // the per-stream path's network (streamnet.go)
}

// WithStreamListenAddr sets the address of the per-stream TCP listener
// ("127.0.0.1:0" unless set). Its actual address is advertised, so port 0
// is fine.
func WithStreamListenAddr(addr string) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.listen = addr }}
}

// WithStreamLogger sends the manager's warnings to l instead of
// slog.Default().
func WithStreamLogger(l *slog.Logger) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.log = l }}
}

// withAcceptWindow shortens the accept window, for tests.
func withAcceptWindow(d time.Duration) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.acceptWindow = d }}
}

// remote is what a Manager from NewNodeManager has beyond the same-worker
// registry: the messenger, the per-stream listener, the streams bound and
// waiting for their connection, and the live connections of both ends.
type remote struct {
	// testAnswered, when set (tests only), runs as a waited attach's
	// answer arrives, before its stream opens.
	testAnswered func()

	m            *Manager
	mux          *mux.Mux // nil when the mux is off
	msg          *messenger.Messenger
	ln           net.Listener
	streams      streamNet // how ln was opened, and how to dial a peer's
	acceptWindow time.Duration
	heartbeat    time.Duration // answered to attaches, and watched by readers
	log          *slog.Logger
	hb           *heartbeater  // beats this node's remote senders
	firings      atomic.Uint64 // streams ended by the watchdog
	// ids draws routing sessions and producer stream ids: random, since
	// a peer presents them back as authority (ids.go).
	ids *idSource

	mu      sync.Mutex
	closed  bool
	pending map[wire.TCPPreamble]*pendingBind
	conns   map[net.Conn]struct{} // every per-stream connection, both ends
	wg      sync.WaitGroup        // accept loop, readers, pumps, watchers

	// This node's remote senders by stream id (control.go).
	sendersMu sync.Mutex
	senders   map[uint64]*remoteSender

	// muxOwners are the owner instances that answered an attach with the
	// mux: the next attach to one may be pipelined (mux_pipeline.go).
	muxOwners sync.Map // ext.InstanceID → struct{}

	renewRequests    atomic.Uint64 // _anchor_renew requests served (tests count batches)
	strangerSignals  atomic.Uint64 // stops, cancels and MPSC detaches ignored: not from the worker they concern
	strangerControls atomic.Uint64 // detaches, finalizes and cancels ignored: not from the bound producer
}

// pendingBind is a stream that _anchor_attach bound and whose connection
// has not arrived.
type pendingBind struct {
	st    *inlet.State
	bind  *remoteBind
	timer *time.Timer
	mpsc  *inlet.Remote // set for a producer of an MPSC anchor (mpsc_remote.go)
}

// NewNodeManager returns the Manager of msg's node, able to stream to and
// from other workers. It registers the attach and control handlers and the
// mux's batch handlers, and, unless WithMuxOnly, listens for per-stream TCP
// connections (on 127.0.0.1:0 unless WithStreamListenAddr says otherwise)
// and advertises the listener under "tcp-stream" in msg's address. Call it
// before handing out msg's PeerInfo, so that peers learn the listener.
// Close stops it.
func NewNodeManager(msg *messenger.Messenger, opts ...ManagerOption) (*Manager, error) {
	cfg := nodeConfig{listen: "127.0.0.1:0", acceptWindow: AcceptWindow, streams: tcpStreams{}, res: DefaultReservationConfig()}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&cfg)
		}
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if cfg.heartbeat < time.Millisecond {
		cfg.heartbeat = defaultHeartbeatInterval
	}
	cfg.heartbeat = cfg.heartbeat.Truncate(time.Millisecond) // what the wire carries
	if cfg.muxOnly && (cfg.mux.Disabled || muxDisabledByEnv()) {
		return nil, errMuxOnlyDisabled
	}
	var ln net.Listener
	if !cfg.muxOnly {
		var err error
		if ln, err = listenStreams(msg, cfg.streams, cfg.listen); err != nil {
			return nil, err
		}
	}
	m := newManager(msg.WorkerID(), &cfg)
	r := &remote{
		m: m, msg: msg, ln: ln, streams: cfg.streams, acceptWindow: cfg.acceptWindow, log: cfg.log,
		heartbeat: cfg.heartbeat, hb: newHeartbeater(), ids: newIDSource(),
		pending: make(map[wire.TCPPreamble]*pendingBind),
		conns:   make(map[net.Conn]struct{}),
		senders: make(map[uint64]*remoteSender),
	}
	m.remote = r
	if err := r.register(cfg); err != nil {
		m.Close() // closes the listener and the mux
		return nil, err
	}
	if mx := r.mux; mx != nil {
		// The mux's goodbyes ride the messenger: it must close before the
		// messenger stops its transports, not after (Manager.Close comes
		// too late when the node shuts down).
		msgrx.OnTeardown(msg, mx.Close)
	}
	r.wg.Add(1)
	go r.hb.run(r.wg.Done) // one for all the streams this node produces
	if ln != nil {
		r.wg.Add(1)
		go r.acceptLoop()
	}
	return m, nil
}

// register registers the node's stream handlers and starts the mux.
func (r *remote) register(cfg nodeConfig) error {
	// Inline on the reader goroutine: the attach takes only short locks and
	// never waits, and a hand-off to another goroutine cost more than the
	// handler on a small machine; it is on the path of every stream's setup.
	err := msgrx.RegisterSystem(r.msg, messenger.UnaryHandler(wire.AnchorAttachHandler, r.onAttach, messenger.WithInline()))
	if err == nil {
		err = r.registerControl()
	}
	if err == nil {
		err = r.startMux(cfg.mux, cfg.metrics)
	}
	if err == nil {
		err = r.registerMPSC()
	}
	return err
}

// listenStreams opens the per-stream listener and advertises it.
func listenStreams(msg *messenger.Messenger, sn streamNet, addr string) (net.Listener, error) {
	ln, err := sn.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("velo: stream listener: %w", err)
	}
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil || ap.Addr().IsUnspecified() {
		// A wildcard address names no interface a peer could dial; the
		// messenger TCP transport lists the interfaces then, which is not
		// built here.
		ln.Close()
		return nil, fmt.Errorf("velo: stream listener %s: listen on a specific address", ln.Addr())
	}
	ip := ap.Addr().Unmap()
	ep := tcp.EncodeEndpoint([]tcp.Interface{{IP: ip.String(), Port: ap.Port(), PrefixLen: uint8(ip.BitLen())}})
	if err := msgrx.AdvertiseAddress(msg, wire.TCPStreamKey, ep); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// streamAddr is the address of the per-stream TCP listener, or nil for a
// Manager from NewManager or one built WithMuxOnly.
func (m *Manager) streamAddr() net.Addr {
	if m.remote == nil || m.remote.ln == nil {
		return nil
	}
	return m.remote.ln.Addr()
}

// stopRemote stops the streams between workers (Close calls it): it
// closes the listener and every per-stream connection (remote producers see
// their stream cancelled, remote consumers see ErrSenderDropped) and waits
// for the Manager's goroutines.
func (m *Manager) stopRemote() {
	r := m.remote
	if r == nil {
		return
	}
	if r.mux != nil {
		r.mux.Close()
	}
	r.mu.Lock()
	first := !r.closed
	r.closed = true
	for k, pb := range r.pending {
		pb.timer.Stop()
		delete(r.pending, k)
	}
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	if first {
		close(r.hb.stop)
	}
	if r.ln != nil {
		r.ln.Close()
	}
	r.wg.Wait()
}

// track adds a per-stream connection to the set that Close closes,
// and counts the goroutines that will serve it. It is false once the
// Manager is shut down.
func (r *remote) track(c net.Conn, goroutines int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	r.wg.Add(goroutines)
	return true
}

func (r *remote) untrack(c net.Conn) {
	c.Close()
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// refusedPrefix starts every refusal that refuseAttach writes.
var refusedPrefix = []byte(`{"Err":`)

func refuseAttach(format string, args ...any) ([]byte, error) {
	resp := wire.AttachResponse{Refused: true, Reason: fmt.Sprintf(format, args...)}
	return resp.AppendJSON(nil), nil
}

// onAttach is the _anchor_attach handler: it binds the stream for the mux
// when the producer offers it (mux_attach.go), on the per-stream listener
// otherwise, and answers with the key and the routing session.
func (r *remote) onAttach(c *messenger.Context) ([]byte, error) {
	return r.countAttach(c, r.attach)
}

// countAttach runs an attach handler and counts it under the transport
// its answer names. Refused attaches are answered, not failed: they count
// as errors.
func (r *remote) countAttach(c *messenger.Context, attach func(*messenger.Context) ([]byte, error)) ([]byte, error) {
	start := r.m.opStart()
	body, err := attach(c)
	if met := r.m.met; met != nil {
		ok := err == nil && !bytes.HasPrefix(body, refusedPrefix)
		sc := metrics.SchemeTCPStream
		if bytes.Contains(body, []byte(mux.WireKey)) {
			sc = metrics.SchemeMux
		}
		met.Operation(metrics.StreamAttach, sc, ok, time.Since(start))
	}
	return body, err
}

// cancelledFirstFrameWait bounds how long a connection to a cancelled
// anchor waits for its producer's first frame before the cancel goes.
const cancelledFirstFrameWait = time.Second

// awaitFirstFrame reads until the first frame arrives, the connection ends
// or d passes. What it reads is dropped: the anchor is over.
func awaitFirstFrame(c net.Conn, d time.Duration) {
	c.SetReadDeadline(time.Now().Add(d))
	fr := frame.NewReader(c, wire.MaxTCPFrame)
	defer fr.Close()
	if f, err := fr.Next(); err == nil {
		f.Release()
	}
}

func (r *remote) attach(c *messenger.Context) ([]byte, error) {
	req, err := wire.DecodeAttachRequest(c.Payload)
	if err != nil {
		return nil, err
	}
	if req.Handle.IsMPSC() {
		return refuseAttach("anchor %v is mpsc; use _mpsc_anchor_attach", req.Handle)
	}
	st := r.m.lookup(req.Handle.LocalID())
	if st == nil {
		return refuseAttach("anchor %v not found", req.Handle)
	}
	if r.mux != nil && offersMux(req.SupportedTransportKeys) {
		return r.attachMux(st, c.SenderWorkerID(), req.LaneKey)
	}
	if r.ln == nil {
		return refuseAttach("this node serves streams only over %s", mux.WireKey)
	}
	if st.ReleasePrebind() {
		// The pre-bound key is the mux, which this producer does not
		// offer: the pre-bind goes back and the attach is refused.
		return refuseAttach("anchor %v is pre-bound for %s, which this producer does not offer", req.Handle, mux.WireKey)
	}
	// A routing session of our own, not the producer's session id: two
	// producers on different workers may use the same one (control.rs).
	key := wire.TCPPreamble{AnchorID: req.Handle.LocalID(), SessionID: r.ids.next()}
	// The producer is the worker the connection speaks for, not the one
	// the body's cancel handle names.
	b := &remoteBind{r: r, key: key, producer: c.SenderWorkerID(),
		streamID: req.CancelHandle.StreamID(), proxy: inlet.NewSender(st, true)}
	// A stop or cancel made before this attach is sent now; the producer
	// registered its sender before it asked, so the message cannot come
	// too early.
	stop, cancel, why := st.ClaimRemote(b)
	switch why {
	case inlet.ClaimEnded:
		return refuseAttach("anchor %v not found", req.Handle)
	case inlet.ClaimTaken:
		return refuseAttach("anchor %v already attached", req.Handle)
	}
	pb := &pendingBind{st: st, bind: b}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		st.UnclaimRemote(b)
		return refuseAttach("node is shutting down")
	}
	r.pending[key] = pb
	// One timer per bound stream, stopped when its connection arrives.
	pb.timer = time.AfterFunc(r.acceptWindow, func() { r.expire(key, pb) })
	r.mu.Unlock()
	switch {
	case cancel:
		b.signal(wire.StreamCancelHandler)
	case stop:
		b.signal(streamStopHandler)
	}

	resp := wire.AttachResponse{
		TransportKey:        wire.TCPStreamKey,
		HeartbeatIntervalMS: uint64(r.heartbeat / time.Millisecond),
		RoutingSessionID:    key.SessionID,
	}
	return resp.AppendJSON(nil), nil
}

// expire ends a bound stream whose connection did not arrive in the
// accept window: the anchor sees ErrSenderDropped, as in the reference.
func (r *remote) expire(key wire.TCPPreamble, pb *pendingBind) {
	r.mu.Lock()
	if r.pending[key] != pb {
		r.mu.Unlock()
		return
	}
	delete(r.pending, key)
	r.mu.Unlock()
	r.log.Warn("velo: stream bound but its producer never connected", "anchor", key.AnchorID, "session", key.SessionID)
	pb.st.DropBind(pb.bind)
}

func (r *remote) acceptLoop() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			r.log.Warn("velo: stream listener", "err", err)
			select {
			case <-time.After(50 * time.Millisecond):
			case <-msgrx.Stopped(r.msg):
			}
			continue
		}
		if !r.track(c, 1) {
			c.Close()
			return
		}
		go r.serve(c)
	}
}

// serve reads one per-stream connection: the preamble, then frames into
// the anchor's inlet until a terminal frame, the connection's end, or the
// consumer's cancel (which closes the connection).
func (r *remote) serve(c net.Conn) {
	defer r.wg.Done()
	defer r.untrack(c)
	var pre [wire.TCPPreambleLen]byte
	c.SetReadDeadline(time.Now().Add(preambleTimeout))
	if _, err := io.ReadFull(c, pre[:]); err != nil {
		return
	}
	key, _ := wire.DecodeTCPPreamble(pre[:])
	r.mu.Lock()
	pb := r.pending[key]
	delete(r.pending, key)
	r.mu.Unlock()
	if pb == nil {
		r.log.Warn("velo: stream connection for no bound stream", "anchor", key.AnchorID, "session", key.SessionID)
		return
	}
	pb.timer.Stop()
	if pb.mpsc != nil {
		r.serveMPSC(c, pb.st.MPSC(), pb.mpsc)
		return
	}
	st, b := pb.st, pb.bind
	// Cancelled before the producer connected, or ended by a control
	// message: closing the connection is how the producer hears of it.
	gone, cancelled := st.ConnectBind(b, c)
	if gone {
		if cancelled {
			// Again, now that the producer is connected: a Rust producer
			// registers the sender that _stream_cancel names only after
			// its connection is up, so the message sent with the attach
			// answer found nothing there and its token never fired. Its
			// first frame (or a short wait) says it is registered: a
			// cancel sent at the preamble could still come too early.
			awaitFirstFrame(c, cancelledFirstFrameWait)
			b.signal(wire.StreamCancelHandler)
		}
		return
	}
	defer st.ClearBind(b)
	proxy := b.proxy
	fr := frame.NewReader(c, wire.MaxTCPFrame)
	defer fr.Close()
	var wd watchdog
	wd.start(c, r.heartbeat)
	for {
		f, err := fr.Next()
		if timeout, fire := wd.expired(err); fire {
			r.fire(st, proxy, &wd)
			return
		} else if timeout {
			continue
		}
		if err != nil {
			// The connection ended without a terminal frame: the
			// producer's node died or cut it. Tell the consumer now,
			// behind the items already in the inlet.
			st.Terminate(proxy, droppedFrame, false)
			return
		}
		if f.Type != ext.Message || len(f.Header) != 0 {
			msg := fmt.Sprintf("per-stream frame of type %d with a %d-byte header", f.Type, len(f.Header))
			st.Terminate(proxy, wire.AppendErrorFrame(nil, wire.KindTransportError, msg), false)
			return
		}
		p := f.Payload
		switch string(p) {
		case wire.HeartbeatFrame:
			wd.frame() // never handed on: the consumer does not see it
			continue
		case wire.FinalizedFrame:
			st.Terminate(proxy, finalizedFrame, false)
			return
		case wire.DroppedFrame:
			st.Terminate(proxy, droppedFrame, false)
			return
		case wire.DetachedFrame:
			st.Terminate(proxy, detachedFrame, true)
			return
		}
		if len(p) > 0 && p[0] == 0x81 && len(p) > 2 && p[1] == 0xae { // {"TransportError": …}
			st.Terminate(proxy, p, false)
			return
		}
		if err := st.Push(context.Background(), proxy, p); err != nil {
			// Cancelled or ended on the consumer's side: closing the
			// connection tells the producer.
			return
		}
		wd.frame()
	}
}
