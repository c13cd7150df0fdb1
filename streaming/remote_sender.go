package streaming

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/mux"
	"github.com/velo-go/velo/transport/tcp"
)

// egressCapacity is how many frames a remote Sender queues for its pump
// before Send waits: the inlet's default, so the two paths push back alike.
const egressCapacity = defaultCapacity

// remoteSender is the producer's end of a stream to an anchor of another
// worker: the connection, the frames queued for the egress pump, and the
// stream's end.
//
// Each stream has two goroutines while it lives, both needed by the
// blocking net.Conn API: the egress pump, which packs what is queued into
// one write (the reference's egress_pump task), and a watcher blocked in a
// Read, which is how a consumer's cancel is seen (the consumer closes the
// connection and writes nothing). Its heartbeats come from the Manager's
// one heartbeater (heartbeat.go), not from a goroutine of its own.
type remoteSender struct {
	r         *remote
	handle    wire.AnchorHandle
	key       string
	conn      net.Conn
	id        uint64        // the stream id in the attach's CancelHandle: the registry key
	stopCh    chan struct{} // closed by _stream_stop only
	cancelCh  chan struct{} // closed when the consumer cancels or the connection fails
	doneCh    chan struct{} // closed by the first of the two
	pumpWake  chan struct{} // cap 1: frames were queued, or the stream ended
	spaceWait chan struct{} // senders wait for room

	mu        sync.Mutex
	q         [][]byte
	active    bool // a frame was queued since the last heartbeat (heartbeat.go)
	done      bool // a terminal is queued
	cancelled bool
	stopped   bool          // stopCh is closed
	why       error         // the first signal's cause (Sender.Context)
	onFire    []func(error) // Sender.Context's cancel, run by the first signal
	lossTimer *time.Timer   // the grace of a connection that ended before any message
	closing   bool          // the pump closed the connection after the terminal
	retirement
}

// attachRemote makes the _anchor_attach round trip to the handle's owner,
// dials its per-stream listener and starts the stream's pump.
func attachRemote[T any](ctx context.Context, r *remote, handle wire.AnchorHandle, encode func(T) ([]byte, error), key *uint64) (*Sender[T], error) {
	info, err := r.reachOwner(ctx, handle)
	if err != nil {
		return nil, err
	}
	owner := info.InstanceID
	if r.canPipeline(owner) {
		// The mux answered this owner before: its per-stream address
		// is not needed, so it is not parsed for every stream.
		return attachPipelined(ctx, r, owner, handle, encode, key)
	}
	addr, err := r.streamAddr(handle, info)
	if err != nil {
		return nil, err
	}
	rs := newRemoteSender(r, handle, r.ids.next())
	// Registered before the request leaves: the owner may send a stop or
	// a cancel (one made before this attach) before its answer arrives.
	r.addSender(rs)
	s, err := bindRemote(ctx, r, rs, owner, addr, encode, key)
	if err != nil {
		r.dropSender(rs)
	}
	return s, err
}

// bindRemote makes the _anchor_attach round trip for rs, dials the
// owner's listener and starts the pump.
func bindRemote[T any](ctx context.Context, r *remote, rs *remoteSender, owner ext.InstanceID, addr string, encode func(T) ([]byte, error), key *uint64) (*Sender[T], error) {
	handle := rs.handle
	var resp wire.AttachResponse
	err := r.askAttach(ctx, owner, wire.AnchorAttachHandler, rs, key, func(body []byte) (string, string, error) {
		var err error
		resp, err = wire.DecodeAttachResponse(body)
		return resp.TransportKey, refusalOf(resp.Refused, resp.Reason), err
	})
	if err != nil {
		return nil, err
	}
	if r.testAnswered != nil {
		r.testAnswered()
	}
	if resp.TransportKey == mux.WireKey && r.mux != nil {
		r.dropSender(rs) // the mux signals its slot; the registry is for the per-stream path
		r.muxOwners.Store(owner, struct{}{})
		return openMuxSender(ctx, r, handle, resp, encode)
	}
	if _, err := r.openStream(ctx, rs, addr, resp.TransportKey, resp.RoutingSessionID, resp.HeartbeatIntervalMS); err != nil {
		return nil, err
	}
	return &Sender[T]{producer[T]{sink: rs, encode: encode}}, nil
}

// reachOwner finds the instance that owns handle and makes sure the owner
// knows this node.
func (r *remote) reachOwner(ctx context.Context, handle wire.AnchorHandle) (ext.PeerInfo, error) {
	info, err := r.ownerInfo(ctx, handle)
	if err != nil {
		return ext.PeerInfo{}, err
	}
	// The owner answers through its peer table: the _hello exchange puts
	// this node there (a system handler's call does not greet on its own).
	// A draining owner refuses _hello and may know this node already.
	if err := msgrx.Handshake(r.msg, ctx, info.InstanceID); err != nil && !errors.Is(err, messenger.ErrShuttingDown) {
		return ext.PeerInfo{}, fmt.Errorf("velo: attach %v: %w", handle, err)
	}
	return info, nil
}

// streamAddr is the address of the per-stream listener that owner info
// advertises. With the mux on, an owner without a listener is fine: the
// address is then "", and the attach must negotiate the mux.
func (r *remote) streamAddr(handle wire.AnchorHandle, info ext.PeerInfo) (string, error) {
	var addr string
	ep, err := info.Address.Lookup(wire.TCPStreamKey)
	if err == nil {
		addr, err = tcp.DialAddr(ep)
	}
	switch {
	case err == nil:
		return addr, nil
	case r.mux != nil:
		return "", nil
	}
	return "", fmt.Errorf("velo: attach %v: the owner advertises no usable per-stream listener: %w", handle, err)
}

// countAttachRTT records the sender's view of the round trip: success only
// for an answer that bound the stream, under the key it names.
func (r *remote) countAttachRTT(start time.Time, ok bool, key string) {
	met := r.m.met
	if met == nil {
		return
	}
	sc := metrics.SchemeUnknown
	if ok {
		sc = metrics.SchemeOf(key)
	}
	met.AttachRTT(sc, ok, time.Since(start))
}

// newRemoteSender makes the producer's end of a per-stream connection.
func newRemoteSender(r *remote, handle wire.AnchorHandle, id uint64) *remoteSender {
	return &remoteSender{
		r: r, handle: handle, id: id,
		stopCh: make(chan struct{}), cancelCh: make(chan struct{}), doneCh: make(chan struct{}), pumpWake: make(chan struct{}, 1),
	}
}

// openStream opens the per-stream connection that an attach answer bound
// for rs: it dials the owner's listener at addr, writes the preamble
// (routing, or rs's session for an owner that answered none) and starts
// the pump, the watcher and the heartbeats.
func (r *remote) openStream(ctx context.Context, rs *remoteSender, addr, key string, routing, heartbeatMS uint64) (*remoteSender, error) {
	handle, session := rs.handle, rs.id
	if key != wire.TCPStreamKey || addr == "" {
		return nil, fmt.Errorf("velo: attach %v: the owner answered transport %q, which this node cannot use", handle, key)
	}
	if routing == 0 {
		routing = session
	}
	dctx, cancel := context.WithTimeout(ctx, preambleTimeout)
	defer cancel()
	conn, err := r.streams.Dial(dctx, addr)
	if err != nil {
		// The owner waits for this connection until its accept window
		// ends, then its anchor sees ErrSenderDropped.
		return nil, fmt.Errorf("velo: attach %v: dial %s: %w", handle, addr, err)
	}
	pre := wire.TCPPreamble{AnchorID: handle.LocalID(), SessionID: routing}.Append(make([]byte, 0, 64))
	conn.SetWriteDeadline(deadlineOf(dctx))
	if _, err := conn.Write(pre); err != nil {
		conn.Close()
		return nil, fmt.Errorf("velo: attach %v: write preamble: %w", handle, err)
	}
	conn.SetWriteDeadline(time.Time{})
	rs.key, rs.conn = key, conn
	if !r.track(conn, 2) {
		conn.Close()
		return nil, fmt.Errorf("velo: attach %v: %w", handle, messenger.ErrShuttingDown)
	}
	go rs.pump()
	go rs.watch()
	r.hb.add(rs, time.Duration(heartbeatMS)*time.Millisecond)
	return rs, nil
}

// attachRefusal turns the owner's reason into the error the same-worker
// attach returns for it, so that errors.Is works on both paths.
func attachRefusal(handle wire.AnchorHandle, reason string) error {
	switch {
	case strings.Contains(reason, "already attached"):
		return fmt.Errorf("%w: %v (owner: %s)", ErrAlreadyAttached, handle, reason)
	case strings.Contains(reason, "not found"):
		return fmt.Errorf("%w: %v (owner: %s)", ErrAnchorNotFound, handle, reason)
	}
	return fmt.Errorf("velo: attach %v refused: %s", handle, reason)
}

// Push queues one frame for the pump, waiting while the queue is full.
func (rs *remoteSender) Push(ctx context.Context, frame []byte) error {
	if len(frame) > wire.MaxTCPFrame {
		return &ItemTooLargeError{Size: len(frame), Limit: wire.MaxTCPFrame}
	}
	waited := false // counted once per send, however long it waits
	rs.mu.Lock()
	for {
		switch {
		case rs.done:
			rs.mu.Unlock()
			return ErrSenderClosed
		case rs.cancelled:
			rs.mu.Unlock()
			return ErrCancelled
		case len(rs.q) < egressCapacity:
			rs.q = append(rs.q, frame)
			rs.active = true
			first := len(rs.q) == 1
			rs.mu.Unlock()
			if first {
				rs.wake()
			}
			return nil
		}
		if !waited {
			waited = true
			if met := rs.r.m.met; met != nil {
				met.ProducerBackpressure(metrics.SchemeOf(rs.key))
			}
		}
		if rs.spaceWait == nil {
			rs.spaceWait = make(chan struct{})
		}
		w := rs.spaceWait
		rs.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
		rs.mu.Lock()
	}
}

func (rs *remoteSender) wake() {
	select {
	case rs.pumpWake <- struct{}{}:
	default:
	}
}

func (rs *remoteSender) wakeSpaceLocked() {
	if rs.spaceWait != nil {
		close(rs.spaceWait)
		rs.spaceWait = nil
	}
}

// terminate queues a terminal past the queue's capacity; it never waits.
// The pump writes it behind every frame before it and retires the stream.
func (rs *remoteSender) terminate(frame []byte) error {
	rs.mu.Lock()
	if rs.done {
		rs.mu.Unlock()
		return ErrSenderClosed
	}
	rs.done = true
	if rs.cancelled {
		rs.mu.Unlock()
		rs.retire(RetireDiscarded)
		rs.wake()
		return ErrCancelled
	}
	rs.q = append(rs.q, frame)
	rs.wakeSpaceLocked()
	rs.mu.Unlock()
	rs.wake()
	return nil
}

// retire records the outcome once and wakes whoever waits for it.
func (rs *remoteSender) retire(out RetireOutcome) {
	// Out of the registry first: whoever sees the outcome finds no entry.
	rs.r.dropSender(rs)
	rs.mu.Lock()
	if rs.Known() != 0 {
		rs.mu.Unlock()
		return
	}
	rs.SettleLocked(out)
	rs.mu.Unlock()
}

// RetiredCh takes the lock only while the outcome is unknown.
func (rs *remoteSender) RetiredCh() <-chan struct{} {
	if rs.Known() != 0 {
		return rs.retirement.Closed()
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.WatchLocked()
}

// fail marks the stream cancelled, with why as the cause Sender.Context
// reports: ErrCancelled for the consumer's cancel, ErrConsumerLost when
// its connection or node went.
func (rs *remoteSender) fail(why error) {
	rs.mu.Lock()
	if rs.cancelled || rs.closing {
		rs.mu.Unlock()
		return
	}
	rs.cancelled = true
	close(rs.cancelCh)
	rs.fireLocked(why)
	rs.wakeSpaceLocked()
	if rs.lossTimer != nil {
		rs.lossTimer.Stop()
	}
	rs.mu.Unlock()
	rs.wake()
}

// fireLocked closes Done on the first signal and keeps its cause.
func (rs *remoteSender) fireLocked(why error) {
	if rs.why == nil {
		rs.why = why
		close(rs.doneCh)
		for _, fn := range rs.onFire {
			fn(why)
		}
		rs.onFire = nil
	}
}

// WatchFire runs fn with the cause at the first signal, or returns the
// cause if one has fired already.
func (rs *remoteSender) WatchFire(fn func(error)) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.why != nil {
		return rs.why
	}
	rs.onFire = append(rs.onFire, fn)
	return nil
}

// Cause is the first signal's cause, or nil.
func (rs *remoteSender) Cause() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.why
}

// stop fires Stopped only: the consumer asked for a graceful end, and the
// producer may still send its last items and Finalize. A stop that comes
// after a cancel does nothing.
func (rs *remoteSender) stop() {
	rs.mu.Lock()
	if !rs.stopped && !rs.cancelled {
		rs.stopped = true
		close(rs.stopCh)
		rs.fireLocked(ErrStopRequested)
	}
	rs.mu.Unlock()
}

// awaitFail waits for fail: the cancel message, the node's loss or the
// grace of connEnded.
func (rs *remoteSender) awaitFail() {
	for {
		rs.mu.Lock()
		c := rs.cancelled
		rs.mu.Unlock()
		if c {
			return
		}
		<-rs.pumpWake
	}
}

// connLossGrace is how long a connection that ended before any message
// waits for the consumer's _stream_cancel, which travels on the
// messenger's connection and may arrive after the close it preceded: a
// cancel then reads as ErrCancelled, not as a lost consumer. A lost node
// (peerLost) does not wait.
const connLossGrace = 50 * time.Millisecond

// connEnded is the watcher's end, or a failed write: the consumer closed
// the connection (its cancel's backstop) or went away. Closed by this side (Close, the
// terminal written), fail does nothing.
func (rs *remoteSender) connEnded() {
	rs.mu.Lock()
	if rs.cancelled || rs.closing || rs.lossTimer != nil {
		rs.mu.Unlock()
		return
	}
	rs.lossTimer = time.AfterFunc(connLossGrace, func() { rs.fail(ErrConsumerLost) })
	rs.mu.Unlock()
}

// pump writes what is queued, all of it in one write, until it has written
// the terminal or the connection failed. Then it closes the connection.
func (rs *remoteSender) pump() {
	defer rs.r.wg.Done()
	defer rs.r.untrack(rs.conn)
	defer rs.r.hb.remove(rs)
	defer rs.r.dropSender(rs) // the stream ended: no signal can reach it now
	var buf []byte
	var batch [][]byte
	for {
		rs.mu.Lock()
		for len(rs.q) == 0 && !rs.cancelled {
			rs.mu.Unlock()
			<-rs.pumpWake
			rs.mu.Lock()
		}
		if rs.cancelled {
			// Nothing queued is handed on; a terminal that was queued
			// is discarded.
			rs.q = nil
			rs.mu.Unlock()
			rs.retire(RetireDiscarded)
			return
		}
		batch, rs.q = rs.q, batch[:0]
		// done is set as the terminal is queued, and nothing is queued
		// after it: the terminal is the last frame of this batch.
		terminal := rs.done
		rs.closing = terminal // the watcher's wake-up after this is ours
		rs.wakeSpaceLocked()
		rs.mu.Unlock()

		buf = buf[:0]
		for i, f := range batch {
			buf = wire.AppendTCPFrame(buf, f)
			batch[i] = nil
		}
		if _, err := rs.conn.Write(buf); err != nil {
			rs.mu.Lock()
			rs.closing = false
			rs.mu.Unlock()
			rs.connEnded() // most often the consumer's cancel closed it
			rs.awaitFail() // registered until then: the cancel message may follow
			rs.retire(RetireDiscarded)
			return
		}
		if met := rs.r.m.met; met != nil {
			met.EgressFlushed(len(batch))
		}
		if terminal {
			rs.retire(RetireSent)
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil // do not keep a large item's buffer for the rest of the stream
		}
	}
}

// watch waits for the consumer to close the connection. The consumer never
// writes, so any return of Read is the end of the connection.
func (rs *remoteSender) watch() {
	defer rs.r.wg.Done()
	var b [1]byte
	rs.conn.Read(b[:])
	// The consumer closed the connection (or wrote, which it must not), or
	// Close closed it; fail does nothing once the pump wrote the
	// terminal and closed it itself.
	rs.connEnded()
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// ownerInfo is the PeerInfo of the anchor's owner: from the peer table, or
// through discovery for an owner this node has not met (the handle came in
// a request from a third node).
func (r *remote) ownerInfo(ctx context.Context, handle wire.AnchorHandle) (ext.PeerInfo, error) {
	owner := handle.Owner()
	if info, ok := msgrx.PeerInfoOf(r.msg, owner); ok {
		return info, nil
	}
	if _, err := msgrx.ResolveWorker(r.msg, ctx, owner); err != nil {
		return ext.PeerInfo{}, fmt.Errorf("velo: owner of anchor %v: %w", handle, err)
	}
	info, ok := msgrx.PeerInfoOf(r.msg, owner)
	if !ok {
		return ext.PeerInfo{}, fmt.Errorf("%w: worker %v, owner of anchor %v", messenger.ErrPeerNotRegistered, owner, handle)
	}
	return info, nil
}

// askAttach sends an attach request for rs (the producer's session and
// cancel handle, the transports it offers, the lane key) to owner's
// handler, decodes the answer with decode (the transport key, and the
// owner's reason when it refused), and counts the round trip. A refusal
// comes back as the error that the same-worker attach gives.
func (r *remote) askAttach(ctx context.Context, owner ext.InstanceID, handler string, rs *remoteSender, key *uint64, decode func([]byte) (transport, refusal string, err error)) error {
	req := wire.AttachRequest{
		Handle:                 rs.handle,
		SessionID:              rs.id,
		CancelHandle:           wire.NewCancelHandle(r.msg.WorkerID(), rs.id),
		SupportedTransportKeys: r.offeredKeys(),
		LaneKey:                key,
	}
	rttStart := r.m.opStart()
	body, err := r.msg.Unary(ctx, owner, handler, req.AppendJSON(make([]byte, 0, 256)))
	if err != nil {
		msgerr.NameOp(err, "stream attach") // the remote messenger's refusal
	}
	var transport, refusal string
	if err == nil {
		transport, refusal, err = decode(body)
	}
	r.countAttachRTT(rttStart, err == nil && refusal == "", transport)
	switch {
	case err != nil:
		return fmt.Errorf("velo: attach %v: %w", rs.handle, err)
	case refusal != "":
		return attachRefusal(rs.handle, refusal)
	}
	return nil
}

// refusalOf is the reason of a refused answer, "" for one that bound.
func refusalOf(refused bool, reason string) string {
	if !refused {
		return ""
	}
	if reason == "" {
		return "refused" // never empty: "" means bound
	}
	return reason
}
