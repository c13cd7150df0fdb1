package streamsock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// peer is a registered peer: its endpoint and its lanes, each dialed on
// first use.
type peer struct {
	id       ext.InstanceID
	endpoint []byte
	lanes    []atomic.Pointer[lane]
	stats    []laneCounters // one per lane slot (lanestats.go)
	mu       sync.Mutex     // serializes lane creation
	gone     atomic.Bool    // unregistered or replaced
	// saidBye: one of its connections carried a goodbye or a drain echo.
	// The peer is going in order, so the end of any lane to it, or a
	// refused dial, is that shutdown too (lane.lossReport).
	saidBye atomic.Bool
	// fenced: the peer holds unproven connections, so each new lane to it
	// starts fenced (fence.go).
	fenced bool
}

// Transport is an ext.Transport over stream sockets.
type Transport struct {
	cfg Config
	net Network

	adapter *ext.TransportAdapter
	obsv    atomic.Pointer[obsBox]

	peersMu sync.Mutex
	peers   atomic.Pointer[map[ext.InstanceID]*peer] // copied on write: sends never lock
	// lastPeer caches the peer of the latest send: most traffic goes to
	// one peer at a time, and this skips hashing its id. Unregister clears it.
	lastPeer atomic.Pointer[peer]

	ln       net.Listener
	accepted sync.Map     // net.Conn -> struct{}: listener-side sockets to close at shutdown
	byConn   sync.Map     // ext.ConnID -> net.Conn: accepted sockets, for ConfirmConn
	inbound  atomic.Int64 // accepted connections open now
	log      *slog.Logger

	// Counters a test or an operator can read (see Stats).
	refused        atomic.Uint64
	stalled        atomic.Uint64
	acceptErrs     atomic.Uint64
	fenceWaits     atomic.Uint64
	fenceTimeouts  atomic.Uint64
	handshakeFails atomic.Uint64

	// life ends at shutdown: it cuts the TLS handshakes of accepted
	// connections short (tls.go).
	life    context.Context
	endLife context.CancelFunc

	closing  atomic.Bool
	shutOnce sync.Once
	stop     chan struct{} // closed at shutdown: ends the accept loop's backoff
	closedCh chan struct{}
	wg       sync.WaitGroup // writers, and every accepted connection until its reading ends
	writers  sync.WaitGroup // the lane writers alone: the goodbye waits for them
	acceptWG sync.WaitGroup

	// Readers that handed their connection on (leader.go) wait here for
	// one to lead; parked counts them.
	followers chan *connRead
	parked    atomic.Int32
	handoffs  atomic.Uint64 // connections handed from one reader to another, for tests
	watch     watchdog      // over requests run on readers (watch.go)

	// testWriteHook, when set by a test, sees the segments of every write call.
	testWriteHook func([]segment)
	// testLaneStarted, when set by a test, runs in laneFor after a new lane
	// has started, before laneFor returns it.
	testLaneStarted func(*lane)
	// testReadHook, when set by a test, sees the byte count of every read
	// of an accepted connection.
	testReadHook func(n int)
	// testHandoffHook, when set by a test, runs in reader.Handoff just
	// before the run is registered with the watchdog.
	testHandoffHook func()
	// echoSettle is how long a failed write waits for its connection's echo
	// reader (lane.awaitEchoes): the constant, or a test's own bound.
	echoSettle time.Duration
	// testAwaitEchoes, when set by a test, runs as a failed write starts
	// to wait for its connection's echo reader.
	testAwaitEchoes func()
	// testQueuedHook, when set by a test, runs as a send takes
	// sendQueued's path.
	testQueuedHook func()
}

// obsBox holds the metrics handle and whether it records anything, so the
// send path reads a field instead of making an interface call.
type obsBox struct {
	ext.Observability
	enabled bool
	conn    ext.ConnectionObservability // nil when the handle has none
}

// New makes a transport over the given network.
func New(n Network, cfg Config) (*Transport, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	t := &Transport{cfg: cfg, net: n, closedCh: make(chan struct{}), stop: make(chan struct{}), followers: make(chan *connRead), echoSettle: echoSettle}
	t.watch.t = t
	t.life, t.endLife = context.WithCancel(context.Background())
	t.log = cfg.Logger.With("transport", string(cfg.Key))
	empty := map[ext.InstanceID]*peer{}
	t.peers.Store(&empty)
	t.obsv.Store(&obsBox{Observability: ext.NopObservability{}})
	return t, nil
}

func (t *Transport) obs() ext.Observability { return t.obsv.Load().Observability }

// Network is what the transport listens and dials with.
func (t *Transport) Network() Network { return t.net }

// Key names the transport in addresses.
func (t *Transport) Key() ext.TransportKey { return t.cfg.Key }

// Priority orders transports that reach the same peer.
func (t *Transport) Priority() int { return t.cfg.Priority }

// MaxMessageSize is the largest header plus payload sent or accepted.
func (t *Transport) MaxMessageSize() int { return t.cfg.MaxFrameSize }

// Lanes is the configured lane count; it is the same for every peer.
func (t *Transport) Lanes(ext.InstanceID) int { return t.cfg.Lanes }

// SetObservability installs the metrics handle.
func (t *Transport) SetObservability(o ext.Observability) {
	if o == nil {
		o = ext.NopObservability{}
	}
	co, _ := o.(ext.ConnectionObservability)
	t.obsv.Store(&obsBox{Observability: o, enabled: o.Enabled(), conn: co})
}

// Stats are counts of what a transport did to protect itself.
type Stats struct {
	// RefusedConnections: inbound connections closed at accept because
	// MaxConnections were already open.
	RefusedConnections uint64
	// StalledConnections: inbound connections closed because a frame stayed
	// half-received past FrameTimeout.
	StalledConnections uint64
	// AcceptErrors: failed accepts, each followed by a backoff.
	AcceptErrors uint64
	// FenceWaits: sends that waited at the fence of a new connection
	// until its receiver confirmed it (see ext.ConnConfirmer).
	FenceWaits uint64
	// FenceTimeouts: fences lifted with sends waiting because the
	// receiver did not confirm the connection in time.
	FenceTimeouts uint64
	// HandshakeFailures: inbound connections closed because their TLS
	// handshake failed or did not finish within FrameTimeout.
	HandshakeFailures uint64
}

// Stats reads the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{
		RefusedConnections: t.refused.Load(),
		StalledConnections: t.stalled.Load(),
		AcceptErrors:       t.acceptErrs.Load(),
		FenceWaits:         t.fenceWaits.Load(),
		FenceTimeouts:      t.fenceTimeouts.Load(),
		HandshakeFailures:  t.handshakeFails.Load(),
	}
}

// dropped counts an inbound connection closed for reason.
func (t *Transport) dropped(reason ext.ConnectionDrop) {
	switch reason {
	case ext.DropOverLimit:
		t.refused.Add(1)
	case ext.DropStalledFrame:
		t.stalled.Add(1)
	}
	if co := t.obsv.Load().conn; co != nil {
		co.ConnectionDropped(reason)
	}
}

// Start listens and returns the endpoint peers dial.
func (t *Transport) Start(ctx context.Context, adapter *ext.TransportAdapter) ([]byte, error) {
	if t.adapter != nil {
		return nil, errors.New("streamsock: transport already started")
	}
	ln, endpoint, err := t.net.Listen(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: listen: %w", t.cfg.Key, err)
	}
	t.adapter, t.ln = adapter, ln
	t.acceptWG.Add(1)
	go t.acceptLoop()
	return endpoint, nil
}

// Register learns a peer's endpoint. Registering again with a new endpoint
// replaces the old connections.
func (t *Transport) Register(p ext.PeerInfo) error {
	ep, err := p.Address.Lookup(t.cfg.Key)
	if err != nil {
		return err
	}
	if c, ok := t.net.(EndpointChecker); ok {
		if err := c.CheckEndpoint(ep); err != nil {
			return fmt.Errorf("%s: peer %s: %w", t.cfg.Key, p.InstanceID, err)
		}
	}
	t.peersMu.Lock()
	defer t.peersMu.Unlock()
	old := *t.peers.Load()
	if cur, ok := old[p.InstanceID]; ok {
		if string(cur.endpoint) == string(ep) {
			return nil
		}
		cur.gone.Store(true)
		cur.abortAll()
	} else {
		t.obs().RegisteredPeers(1)
	}
	next := make(map[ext.InstanceID]*peer, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[p.InstanceID] = &peer{id: p.InstanceID, endpoint: append([]byte(nil), ep...), lanes: make([]atomic.Pointer[lane], t.cfg.Lanes), stats: make([]laneCounters, t.cfg.Lanes), fenced: fences(p.Address)}
	t.peers.Store(&next)
	return nil
}

// Unregister forgets a peer and closes its connections; frames still queued
// for it fail at once. It is cheap and idempotent.
func (t *Transport) Unregister(id ext.InstanceID) {
	if _, ok := (*t.peers.Load())[id]; !ok {
		return
	}
	t.peersMu.Lock()
	old := *t.peers.Load()
	p, ok := old[id]
	if ok {
		next := make(map[ext.InstanceID]*peer, len(old))
		for k, v := range old {
			if k != id {
				next[k] = v
			}
		}
		t.peers.Store(&next)
		t.obs().RegisteredPeers(-1)
	}
	t.peersMu.Unlock()
	if ok {
		p.gone.Store(true)
		p.abortAll()
	}
}

// abortAll stops every lane of a peer that is gone. It takes the lane lock,
// so a lane that a send is starting right now is either seen here or sees
// gone and does not start.
func (p *peer) abortAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.lanes {
		if l := p.lanes[i].Load(); l != nil {
			l.abort()
		}
	}
}

// Send sends f on lane 0.
func (t *Transport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	return t.SendOnLane(target, 0, f)
}

// SendOnLane puts f on the send channel of (target, lane). It never waits
// for the wire; a full channel gives a Pending outcome.
func (t *Transport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	return t.SendOnLaneRef(target, lane, &f)
}

// SendOnLaneRef is SendOnLane for a frame the caller keeps (ext.FrameRefSender):
// *f is read during the call and copied once, where the lane keeps it.
func (t *Transport) SendOnLaneRef(target ext.InstanceID, lane int, f *ext.Frame) (ext.SendOutcome, error) {
	if t.closing.Load() {
		return ext.SendOutcome{}, ext.ErrTransportClosed
	}
	size := len(f.Header) + len(f.Payload)
	if size > t.cfg.MaxFrameSize {
		t.obs().Rejection(ext.RejectTooLarge)
		return ext.SendOutcome{}, &ext.FrameTooLargeError{Size: size, Max: t.cfg.MaxFrameSize}
	}
	if lane < 0 || lane >= t.cfg.Lanes {
		return ext.SendOutcome{}, fmt.Errorf("%w: %d of %d", ext.ErrLaneOutOfRange, lane, t.cfg.Lanes)
	}
	box := t.obsv.Load()
	obs := box.Observability
	if !f.Urgent && !box.enabled && size <= frame.CoalesceThreshold {
		return t.sendSmall(target, lane, f, obs)
	}
	return t.sendQueued(target, lane, f, obs, box.enabled)
}

// sendQueued is SendOnLaneRef through the lane's gate, which admits the
// frame or queues it; stamped: observability is on, so the frame's wait
// is timed.
func (t *Transport) sendQueued(target ext.InstanceID, lane int, f *ext.Frame, obs ext.Observability, stamped bool) (ext.SendOutcome, error) {
	if t.testQueuedHook != nil {
		t.testQueuedHook()
	}
	size := len(f.Header) + len(f.Payload)
	// The frame may wait in the gate or the queue after the caller lets go
	// of a pooled buffer it lives in: the lane holds a reference on its
	// Owner then (outFrame.hold), until the writer is done with it. One
	// copied within this call needs none: the caller's lasts until it
	// returns.
	of := outFrame{Frame: *f}
	if stamped {
		of.stamp = monotonic()
	}
	// A lane that died between the lookup and the send refuses it; the
	// retry dials a fresh one. Two tries cover that race.
	for try := 0; ; try++ {
		p, ok := t.lookup(target)
		if !ok {
			obs.Rejection(ext.RejectUnknownPeer)
			return ext.SendOutcome{}, fmt.Errorf("%w: %s", ext.ErrPeerNotRegistered, target)
		}
		l := t.laneFor(p, lane)
		if l == nil {
			if p.gone.Load() {
				obs.Rejection(ext.RejectUnknownPeer)
				return ext.SendOutcome{}, fmt.Errorf("%w: %s", ext.ErrPeerNotRegistered, target)
			}
			return ext.SendOutcome{}, ext.ErrTransportClosed
		}
		var out ext.SendOutcome
		var err error
		if f.Urgent {
			err = l.gate.SendFirst(of, frame.PreambleLen+size)
		} else if out, err = l.gate.SendRef(&of, frame.PreambleLen+size); err == nil && !out.Admitted() && l.gate.Fenced() {
			t.fenceWaits.Add(1)
		}
		if err == nil {
			if stamped {
				obs.Frames(ext.Outbound, f.Type, ext.Accepted, 1, size)
			}
			if l.claimed.Load() {
				l.flushInline()
			}
			return out, nil
		}
		if try == 1 || !errors.Is(err, ext.ErrConnectionClosed) {
			obs.Frames(ext.Outbound, f.Type, ext.Rejected, 1, f.Len())
			return ext.SendOutcome{}, err
		}
	}
}

// sendSmall is SendOnLaneRef for a small frame that is not urgent, with
// observability off: when the lane's gate admits it at once, it is copied
// from *f straight into the lane's batch (lane.acceptSmall) under the
// gate's lock, and no outFrame is made; a copy of the eleven-word frame
// into Send, and from there into Accept, stalled on the bytes the sender
// had just stored. Otherwise it takes the common path.
func (t *Transport) sendSmall(target ext.InstanceID, lane int, f *ext.Frame, obs ext.Observability) (ext.SendOutcome, error) {
	p, ok := t.lookup(target)
	if !ok {
		obs.Rejection(ext.RejectUnknownPeer)
		return ext.SendOutcome{}, fmt.Errorf("%w: %s", ext.ErrPeerNotRegistered, target)
	}
	if l := t.laneFor(p, lane); l != nil {
		units := frame.PreambleLen + len(f.Header) + len(f.Payload)
		// A fence lets a small frame in at once as far as it lets it in at
		// all: a reply on a lane whose fence is never confirmed away (one
		// that carries only replies) took sendQueued's path for the fence's
		// whole timeout.
		admitted, err := l.gate.AdmitNowCost(units, fenceCostOf(f.Type, units), func() { l.acceptSmall(f) })
		if admitted {
			if l.claimed.Load() {
				l.flushInline()
			}
			return ext.AdmittedOutcome, nil
		}
		if err != nil && !errors.Is(err, ext.ErrConnectionClosed) {
			obs.Frames(ext.Outbound, f.Type, ext.Rejected, 1, f.Len())
			return ext.SendOutcome{}, err
		}
	}
	return t.sendQueued(target, lane, f, obs, false)
}

// lookup finds a registered peer, trying the one-entry cache first.
func (t *Transport) lookup(id ext.InstanceID) (*peer, bool) {
	if p := t.lastPeer.Load(); p != nil && p.id == id && !p.gone.Load() {
		return p, true
	}
	p, ok := (*t.peers.Load())[id]
	if ok {
		t.lastPeer.Store(p)
	}
	return p, ok
}

// laneFor returns the live lane idx of p, starting one when there is none.
func (t *Transport) laneFor(p *peer, idx int) *lane {
	if l := p.lanes[idx].Load(); l != nil {
		return l
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.lanes[idx].Load(); l != nil {
		return l
	}
	// A peer unregistered since the lookup gets no new lane: nothing
	// would ever stop it.
	if t.closing.Load() || p.gone.Load() {
		return nil
	}
	l := newLane(t, p, idx)
	p.lanes[idx].Store(l)
	l.start()
	if t.testLaneStarted != nil {
		t.testLaneStarted(l)
	}
	return l
}

// CheckHealth reports a peer healthy when any of its lanes has a live
// connection; otherwise it dials the peer once to see that it answers.
func (t *Transport) CheckHealth(ctx context.Context, target ext.InstanceID) error {
	p, ok := (*t.peers.Load())[target]
	if !ok {
		return fmt.Errorf("%w: %s", ext.ErrPeerNotRegistered, target)
	}
	for i := range p.lanes {
		if l := p.lanes[i].Load(); l != nil && l.mode.Load() == running {
			l.connMu.Lock()
			live := l.conn != nil
			l.connMu.Unlock()
			if live {
				return nil
			}
		}
	}
	conn, err := t.net.Dial(ctx, p.endpoint)
	if err != nil {
		return fmt.Errorf("%s: peer %s unreachable: %w", t.cfg.Key, target, err)
	}
	return closeConn(conn)
}

// Shutdown tears the transport down. Writers keep writing the frames already
// queued until the grace ends and fail the rest; the listener closes, and
// each accepted connection gets a goodbye before it closes, so its dialer
// knows this end went away on purpose. Closed reports when that is done.
func (t *Transport) Shutdown() { t.shutdown(false) }

// Kill stops the transport as a crash would: the listener and every
// connection close at once, without a goodbye, and queued frames fail.
// Tests use it to play a peer that dies.
func (t *Transport) Kill() { t.shutdown(true) }

// goodbyeWait bounds each goodbye write at shutdown, and how long a
// connection stays half-closed after it: a peer that does not read or
// never closes must not hold the shutdown.
const goodbyeWait = 100 * time.Millisecond

// goodbye is a ShuttingDown frame with an empty header. A request echo
// always has a header, so the dialer cannot take one for the other.
var goodbye = frame.Append(nil, ext.Frame{Type: ext.ShuttingDown})

func (t *Transport) shutdown(abrupt bool) {
	t.shutOnce.Do(func() {
		t.closing.Store(true)
		close(t.stop)
		t.endLife()
		t.watch.handAllOn() // a blocked handler holds no connection's reading
		deadline := time.Now().Add(t.cfg.TeardownGrace)
		t.peersMu.Lock()
		peers := *t.peers.Load()
		t.peersMu.Unlock()
		for _, p := range peers {
			// Take the lane lock so no lane starts after this walk.
			p.mu.Lock()
			for i := range p.lanes {
				switch l := p.lanes[i].Load(); {
				case l == nil:
				case abrupt:
					l.abort()
				default:
					l.teardown(deadline)
				}
			}
			p.mu.Unlock()
		}
		if t.ln != nil {
			t.ln.Close()
		}
		// A network may own files (a UDS socket directory) to remove.
		if c, ok := t.net.(interface{ Cleanup() }); ok {
			c.Cleanup()
		}
		if abrupt {
			t.accepted.Range(func(k, _ any) bool {
				closeConn(k.(net.Conn))
				return true
			})
		} else {
			t.wg.Add(1)
			go t.sayGoodbye(deadline)
		}
		go t.waitClosed(deadline.Add(500 * time.Millisecond))
	})
}

// sayGoodbye tells each accepted connection's dialer that this end is
// going. It waits first for the lane writers to write what they had queued
// (answers to those dialers, on connections of their own), up to the
// teardown deadline: a dialer fails what still waits on this node soon
// after the goodbye, so the answers should be out before it.
func (t *Transport) sayGoodbye(deadline time.Time) {
	defer t.wg.Done()
	flushed := make(chan struct{})
	go func() {
		t.writers.Wait()
		close(flushed)
	}()
	timer := time.NewTimer(time.Until(deadline))
	select {
	case <-flushed:
	case <-timer.C:
	}
	timer.Stop()
	var wg sync.WaitGroup
	t.accepted.Range(func(k, _ any) bool {
		wg.Add(1)
		go func(conn net.Conn) { // each its own write: one stuck peer holds up nobody else
			defer wg.Done()
			byeOne(conn)
		}(k.(net.Conn))
		return true
	})
	wg.Wait()
}

// byeOne writes the goodbye on one accepted connection, then half-closes
// it and lets its reader discard what still comes until the dialer closes
// its end: closing a socket with unread bytes resets it, and a reset can
// destroy the goodbye before the dialer reads it. The deadline ends a
// write to a dialer that does not read (which may also hold an echo write
// blocked), and the timer a dialer that never closes.
func byeOne(conn net.Conn) {
	conn.SetWriteDeadline(time.Now().Add(goodbyeWait))
	conn.Write(goodbye)
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		time.AfterFunc(goodbyeWait, func() { conn.Close() })
		return
	}
	closeConn(conn)
}

func (t *Transport) waitClosed(limit time.Time) {
	done := make(chan struct{})
	go func() {
		// The accept loop first: it may still add a reader to wg.
		t.acceptWG.Wait()
		t.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(time.Until(limit))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
	close(t.closedCh)
}

// Closed is closed once the writers finished (or the grace plus half a
// second passed) and the listener is closed.
func (t *Transport) Closed() <-chan struct{} { return t.closedCh }

// acceptLoop runs one reader per accepted connection. A failed accept is
// retried after a pause that starts at 5 ms and doubles up to 1 s, as
// net/http's Server.Serve does: running out of file descriptors (EMFILE,
// ENFILE) passes once connections close, and returning would leave the
// node deaf for good while it still looked alive.
func (t *Transport) acceptLoop() {
	defer t.acceptWG.Done()
	var delay time.Duration
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			if t.closing.Load() {
				return
			}
			t.acceptErrs.Add(1)
			if co := t.obsv.Load().conn; co != nil {
				co.AcceptError()
			}
			if !temporary(err) {
				// Close the socket too, so peers are refused at once
				// rather than queued in a backlog nobody reads.
				t.log.Error("accept failed; no more inbound connections", "err", err)
				t.ln.Close()
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn("accept failed; retrying", "err", err, "delay", delay)
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case <-t.stop:
				timer.Stop()
				return
			}
			continue
		}
		delay = 0
		if t.inbound.Load() >= int64(t.cfg.MaxConnections) {
			t.dropped(ext.DropOverLimit)
			conn.Close()
			continue
		}
		t.inbound.Add(1)
		t.accepted.Store(conn, struct{}{})
		if t.closing.Load() {
			conn.Close()
		}
		t.obs().ActiveConnections(1)
		t.wg.Add(1)
		go t.serve(conn)
	}
}

// temporary reports whether a failed accept may succeed later: a timeout,
// or the process or system out of descriptors or memory.
func temporary(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var te interface{ Temporary() bool }
	if errors.As(err, &te) && te.Temporary() { // EMFILE, ENFILE, EINTR, timeouts
		return true
	}
	return errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// serve reads frames from one accepted connection until it ends. A bad
// frame closes this connection only. Requests read together are decoded
// straight into one batch and admitted together: one queue operation per
// read rather than per frame.
func (t *Transport) serve(conn net.Conn) {
	state, ok := t.handshake(conn)
	if !ok {
		t.connEnded(conn)
		return
	}
	g, r := newStallGuard(conn, t.cfg.MaxFrameSize, t.cfg.FrameTimeout, t.testReadHook)
	g.acks = newAckDelayer(conn)
	g.acks.read() // before the first frame arrives
	r.Conn = ext.NewConnID()
	r.Direct = t.payloadInto
	t.adapter.ConnTLS(r.Conn, state) // before the first frame
	t.byConn.Store(r.Conn, conn)
	rd := &reader{t: t, st: &connRead{conn: conn, r: r}}
	if rd.lead() {
		rd.follow()
	}
}

// connEnded is the end of an accepted connection, on whichever goroutine
// reads it last. wg counts connections being read, not the goroutines
// that read them (leader.go).
func (t *Transport) connEnded(conn net.Conn) {
	closeConn(conn)
	t.accepted.Delete(conn)
	t.inbound.Add(-1)
	t.obs().ActiveConnections(-1)
	t.wg.Done()
}

// readLoop reads one accepted connection until it ends or until a run
// the sink made on rd (reader.Handoff) lasted and the watchdog handed the
// connection to another goroutine (watch.go); it reports which: true when
// the connection was handed on.
func (rd *reader) readLoop() bool {
	t, st, in := rd.t, rd.st, &rd.in
	conn, r := st.conn, st.r
	for {
		f, err := r.Next()
		for err == nil {
			if f.Type == ext.Message {
				in.msgs = append(in.msgs, ext.InboundMessage{Frame: f})
			} else if !in.flush(t, conn, (*keepRole)(rd)) || !t.routeInbound(f, conn) {
				rd.dropWaits()
				return false
			}
			var ok bool
			if in.msgs, f, ok, err = r.AppendMessages(in.msgs); !ok && err == nil {
				break
			}
		}
		// The read's last batch: the next step is a read, so the sink may
		// take over this goroutine (err is handled first: an ending
		// connection offers nothing), unless it has waits to make first
		// (DeferWait), which a hand-off would leave to no one.
		var h ext.Handoff = (*keepRole)(rd)
		if err == nil && len(rd.waits) == 0 {
			h = rd
		}
		ok := in.flush(t, conn, h)
		if !rd.settle() {
			rd.dropWaits() // none: a run on rd is offered only without waits, and makes none
			return true    // another goroutine reads conn now: nothing here is ours
		}
		if !ok || err != nil {
			rd.dropWaits() // the connection ends: there is no sender to push back on
			if err != nil {
				t.noteReadError(err, conn)
			}
			return false
		}
		rd.awaitSinks()
	}
}

// payloadInto asks the node where a large payload should go (see
// ext.TransportAdapter.PayloadInto), and counts the frame as the route
// would once it is in.
func (t *Transport) payloadInto(typ ext.MessageType, header []byte, n int) ([]byte, func(error)) {
	dst, done := t.adapter.PayloadInto(typ, header, n)
	if dst == nil {
		return nil, nil
	}
	size := len(header) + n
	return dst, func(err error) {
		if err == nil {
			t.obs().Frames(ext.Inbound, typ, ext.Accepted, 1, size)
		}
		done(err)
	}
}

// inbound gathers the requests of one read for batched admission.
type inbound struct {
	msgs []ext.InboundMessage
	echo []byte
}

// flush admits the gathered requests. Refused ones are echoed back as
// ShuttingDown in one write. It returns false when the connection should close.
func (in *inbound) flush(t *Transport, conn net.Conn, h ext.Handoff) bool {
	if len(in.msgs) == 0 {
		return true
	}
	if t.closing.Load() {
		// After the goodbye nothing is admitted or echoed (the write side
		// may be closed): the dialer fails what it sent as refused by the
		// shutdown when its connection ends.
		for i := range in.msgs {
			in.msgs[i].Frame.Release()
		}
		clear(in.msgs)
		in.msgs = in.msgs[:0]
		return true
	}
	obs := t.obs()
	n, bytes := len(in.msgs), 0
	for i := range in.msgs {
		bytes += in.msgs[i].Len()
	}
	outcome, spare := t.adapter.AdmitBatchHandoff(in.msgs, h)
	ok := true
	switch outcome {
	case ext.Admitted:
		obs.Frames(ext.Inbound, ext.Message, ext.Accepted, n, bytes)
	case ext.Draining:
		// spare holds the refused requests; exempt ones were admitted.
		obs.Frames(ext.Inbound, ext.Message, ext.Rejected, len(spare), bytes)
		in.echo = in.echo[:0]
		for _, m := range spare {
			obs.Rejection(ext.RejectDraining)
			in.echo = frame.Append(in.echo, ext.Frame{Type: ext.ShuttingDown, Header: m.Header})
			m.Frame.Release()
		}
		clear(spare)
		_, err := conn.Write(in.echo)
		ok = err == nil
	case ext.Disconnected:
		obs.Frames(ext.Inbound, ext.Message, ext.Rejected, n, bytes)
		for i := 0; i < n; i++ {
			obs.Rejection(ext.RejectRouteFailed)
		}
	}
	in.msgs = spare[:0]
	return ok
}

func (t *Transport) noteReadError(err error, conn net.Conn) {
	switch {
	case errors.Is(err, ext.ErrFrameTooLarge):
		t.obs().Rejection(ext.RejectTooLarge)
	case errors.Is(err, frame.ErrMalformed):
		t.obs().Rejection(ext.RejectMalformed)
	case errors.Is(err, errStalled):
		t.dropped(ext.DropStalledFrame)
		t.log.Warn("closed an inbound connection", "remote", fmt.Sprint(conn.RemoteAddr()), "err", err)
	}
}

// routeInbound hands one frame to the adapter. A request refused by the
// drain is echoed back on conn as ShuttingDown. It returns false when the
// connection should close.
func (t *Transport) routeInbound(f ext.Frame, conn net.Conn) bool {
	obs := t.obs()
	if f.Type != ext.Message {
		if t.adapter.RouteFrame(f) {
			obs.Frames(ext.Inbound, f.Type, ext.Accepted, 1, f.Len())
		} else {
			obs.Frames(ext.Inbound, f.Type, ext.Rejected, 1, f.Len())
			obs.Rejection(ext.RejectRouteFailed)
			f.Release()
		}
		return true
	}
	switch t.adapter.AdmitMessage(f) {
	case ext.Admitted:
		obs.Frames(ext.Inbound, f.Type, ext.Accepted, 1, f.Len())
	case ext.Draining:
		obs.Frames(ext.Inbound, f.Type, ext.Rejected, 1, f.Len())
		obs.Rejection(ext.RejectDraining)
		echo := frame.Append(nil, ext.Frame{Type: ext.ShuttingDown, Header: f.Header})
		f.Release() // refused: the frame is ours to let go of
		if conn != nil {
			if _, err := conn.Write(echo); err != nil {
				return false
			}
		}
	case ext.Disconnected:
		obs.Frames(ext.Inbound, f.Type, ext.Rejected, 1, f.Len())
		obs.Rejection(ext.RejectRouteFailed)
	}
	return true
}
