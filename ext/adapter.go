package ext

import (
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
)

// AdmitOutcome is the result of TransportAdapter.AdmitMessage.
type AdmitOutcome uint8

const (
	// Admitted: the message is queued and counted as in flight.
	Admitted AdmitOutcome = iota
	// Draining: the node is draining. A transport with a return path answers
	// with a ShuttingDown frame that echoes the request header.
	Draining
	// Disconnected: the node has stopped. Record a RouteFailed rejection and
	// drop the frame.
	Disconnected
)

// InboundMessage is an admitted request. It carries the in-flight guard
// that keeps a drain open; call Done once the message has been handled.
type InboundMessage struct {
	Frame
	Guard InFlightGuard
}

// Done releases the message's in-flight guard and its frame memory. Call
// it once, after the last use of the frame's slices.
func (m InboundMessage) Done() {
	m.Guard.Release()
	m.Frame.Release()
}

// SendErrorHandler is told about a frame that a transport admitted but could
// not write. The frame's slices are only valid during the call.
type SendErrorHandler func(target InstanceID, f Frame, err error)

// PeerLostHandler hears that a transport lost its connection to a peer.
// err matches ErrPeerUnreachable.
type PeerLostHandler func(peer InstanceID, err error)

// PeerConnectedHandler hears that a transport opened a connection to a
// peer: transport is its key, remote the address it reached.
type PeerConnectedHandler func(peer InstanceID, transport TransportKey, remote string)

// AdapterConfig sizes the inbound queues of a TransportAdapter.
type AdapterConfig struct {
	// MessageQueue bounds the request queue; a full queue makes readers wait,
	// which pushes back on the senders through the socket. Default 65536.
	MessageQueue int
	// OtherQueue bounds each of the response, event and shutdown queues. Default 65536.
	OtherQueue int

	// OnMessages, when set, receives admitted requests directly, on the
	// transport's reader goroutine, instead of the message queue. This is
	// how net/http runs a handler on its connection's goroutine: no
	// goroutine is woken to take the message. The sink owns each message
	// (call Done) but not the slice, which the reader reuses once the call
	// returns. A sink that blocks holds back its connection's reader, which
	// pushes back on that sender only.
	OnMessages func(batch []InboundMessage)
	// OnMessagesHandoff is OnMessages for a sink that may run a request on
	// the reader goroutine itself: h, when not nil, lets it, and has the
	// reading of the connection passed to another goroutine if the request
	// runs long (see Handoff). It replaces OnMessages when both are set.
	OnMessagesHandoff func(batch []InboundMessage, h Handoff)
	// OnFrame, when set, receives response, ack, event and shutdown frames
	// directly on the reader goroutine instead of their queues. The frame is
	// the sink's to release.
	OnFrame func(f Frame)
	// DrainExempt, when set, names the requests that are admitted even
	// during a drain: those that serve work already accepted (responses to
	// streams, event triggers). It is asked only while draining.
	DrainExempt func(f Frame) bool
	// OnConnClosed, when set, hears that an inbound connection ended, so
	// what the node keeps for that connection can go.
	OnConnClosed func(id ConnID)
	// OnConnTLS, when set, hears the verified TLS state of an inbound
	// connection, once, before the first frame that carries its id; a
	// transport that speaks no TLS never calls it. What it keeps goes at
	// OnConnClosed.
	OnConnTLS func(id ConnID, state *tls.ConnectionState)
	// PayloadInto, when set, is where a transport that reads a byte stream
	// may ask for a destination for a large payload before reading it (see
	// TransportAdapter.PayloadInto). It runs on the reader goroutine.
	PayloadInto func(t MessageType, header []byte, n int) (dst []byte, done func(err error))
}

// TransportAdapter is what a node hands to each transport: the four inbound
// streams (message, response, event, shutdown) and the admission step that
// owns the in-flight count.
type TransportAdapter struct {
	onMessages func([]InboundMessage, Handoff)
	onFrame    func(Frame)
	exempt     func(Frame) bool
	connClosed func(ConnID)
	connTLS    func(ConnID, *tls.ConnectionState)
	into       func(MessageType, []byte, int) ([]byte, func(error))
	closed     atomic.Bool

	state     *ShutdownState
	messages  *Queue[InboundMessage]
	responses *Queue[Frame]
	events    *Queue[Frame]
	shutdowns *Queue[Frame]
	onErr     atomic.Pointer[SendErrorHandler]
	onLost    atomic.Pointer[PeerLostHandler]
	onConn    atomic.Pointer[PeerConnectedHandler]
}

// NewTransportAdapter makes an adapter that admits against state.
func NewTransportAdapter(state *ShutdownState, cfg AdapterConfig) *TransportAdapter {
	if cfg.MessageQueue <= 0 {
		cfg.MessageQueue = 1 << 16
	}
	if cfg.OtherQueue <= 0 {
		cfg.OtherQueue = 1 << 16
	}
	return &TransportAdapter{
		onMessages: sinkOf(cfg),
		onFrame:    cfg.OnFrame,
		exempt:     cfg.DrainExempt,
		connClosed: cfg.OnConnClosed,
		connTLS:    cfg.OnConnTLS,
		into:       cfg.PayloadInto,
		state:      state,
		messages:   NewQueue[InboundMessage](cfg.MessageQueue),
		responses:  NewQueue[Frame](cfg.OtherQueue),
		events:     NewQueue[Frame](cfg.OtherQueue),
		shutdowns:  NewQueue[Frame](cfg.OtherQueue),
	}
}

// State is the shutdown state the adapter admits against.
func (a *TransportAdapter) State() *ShutdownState { return a.state }

// AdmitMessage is the only way onto the message queue. On Draining the
// frame is still the caller's (to echo and release); on Disconnected the
// adapter has released it. It takes the
// in-flight guard first and reads the drain flag second, and the queued
// message carries the guard. A transport must not check IsDraining itself.
func (a *TransportAdapter) AdmitMessage(f Frame) AdmitOutcome {
	return a.admitMessage(f, nil)
}

// admitMessage is AdmitMessage with the Handoff the sink gets with f.
func (a *TransportAdapter) admitMessage(f Frame, h Handoff) AdmitOutcome {
	g, ok := a.state.TryAcquire()
	if !ok {
		if a.exempt == nil || !a.exempt(f) {
			return Draining
		}
		g = a.state.acquireExempt()
	}
	if a.onMessages != nil {
		if a.closed.Load() {
			g.Release()
			f.Release()
			return Disconnected
		}
		one := [1]InboundMessage{{Frame: f, Guard: g}}
		a.onMessages(one[:], h)
		return Admitted
	}
	if err := a.messages.Push(InboundMessage{Frame: f, Guard: g}); err != nil {
		g.Release()
		f.Release()
		return Disconnected
	}
	return Admitted
}

// AdmitMessages admits a run of requests read together, as AdmitBatch
// does, for a caller that holds plain frames. The whole run is admitted or
// refused: it does not consult DrainExempt (a transport that needs
// exemptions uses AdmitBatch, which reports the refused subset). On Draining
// the frames are still the caller's; on Disconnected they were released.
func (a *TransportAdapter) AdmitMessages(frames []Frame) AdmitOutcome {
	if !a.state.tryAcquireN(len(frames)) {
		return Draining
	}
	msgs := make([]InboundMessage, len(frames))
	for i, f := range frames {
		msgs[i].Frame = f
	}
	outcome, _ := a.deliver(msgs, nil)
	return outcome
}

// AdmitBatch admits requests a reader decoded straight into msgs (their
// Guard fields are set here). It follows AdmitMessage's rule, for the whole
// batch at once. When the queue is empty the batch becomes the queue (no
// copy) and the queue's old, empty slice comes back as spare for the
// reader's next batch; otherwise the batch is appended and msgs is returned
// emptied. On Draining the frames are still the caller's; on Disconnected
// the adapter released them.
//
// During a drain, drain-exempt requests are admitted one by one and the
// returned slice holds only the refused ones, in order, for the caller to
// echo.
func (a *TransportAdapter) AdmitBatch(msgs []InboundMessage) (AdmitOutcome, []InboundMessage) {
	return a.AdmitBatchHandoff(msgs, nil)
}

// AdmitBatchHandoff is AdmitBatch from a reader that offers h to the sink
// (AdapterConfig.OnMessagesHandoff): the sink's run may cost the reader
// its role for the rest of the connection. A reader must offer a hand-off
// (a Handoff that may return true) only where it would read next, with
// nothing of its own left to do for the connection, and must check after
// the call whether it still reads. With the other batches of a read it may
// pass a WaitDeferrer whose Handoff is false, to be handed the sink's waits
// for the end of the read.
func (a *TransportAdapter) AdmitBatchHandoff(msgs []InboundMessage, h Handoff) (AdmitOutcome, []InboundMessage) {
	if !a.state.tryAcquireN(len(msgs)) {
		// The exempt requests go to the sink one by one, none of them the
		// batch's last, so none may take the reader's role; but a reader
		// that makes the sink's waits itself still does, rather than have
		// the sink wait with the rest of the read behind it.
		var one Handoff
		refused := msgs[:0]
		for _, m := range msgs {
			if a.exempt != nil && a.exempt(m.Frame) {
				if d, ok := h.(WaitDeferrer); ok && one == nil {
					one = deferOnly{d} // made once a batch needs it: a drain's batches mostly do not
				}
				a.admitMessage(m.Frame, one)
			} else {
				refused = append(refused, m)
			}
		}
		clear(msgs[len(refused):])
		return Draining, refused
	}
	return a.deliver(msgs, h)
}

// deliver hands admitted requests (their units already taken) to the sink
// or the queue, setting their guards.
func (a *TransportAdapter) deliver(msgs []InboundMessage, h Handoff) (AdmitOutcome, []InboundMessage) {
	for i := range msgs {
		msgs[i].Guard = InFlightGuard{s: a.state}
	}
	if a.onMessages != nil {
		if a.closed.Load() {
			DoneAll(msgs)
			clear(msgs)
			return Disconnected, msgs[:0]
		}
		a.onMessages(msgs, h)
		clear(msgs)
		return Admitted, msgs[:0]
	}
	spare, n, err := a.messages.pushSwap(msgs)
	if err != nil {
		for _, m := range msgs[n:] {
			m.Done()
		}
		clear(msgs)
		return Disconnected, msgs[:0]
	}
	return Admitted, spare
}

// DoneAll calls Done on every message of a batch, with one atomic update
// per run of messages that share a guard state or a buffer instead of two
// per message.
func DoneAll(msgs []InboundMessage) {
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].Guard.s == msgs[i].Guard.s {
			j++
		}
		if s := msgs[i].Guard.s; s != nil {
			s.releaseN(int64(j - i))
		}
		i = j
	}
	for i := 0; i < len(msgs); {
		o := msgs[i].Owner
		j := i + 1
		for j < len(msgs) && msgs[j].Owner == o {
			j++
		}
		ReleaseOwnerN(o, j-i)
		i = j
	}
}

// RouteFrame puts a non-request frame on its stream: Response to responses,
// Ack and Event to events, ShuttingDown to shutdowns. A Message frame is
// admitted with AdmitMessage instead. It reports false when the stream is
// closed (the node stopped) or the type is unknown.
func (a *TransportAdapter) RouteFrame(f Frame) bool {
	if a.onFrame != nil && f.Type.Valid() && f.Type != Message {
		if a.closed.Load() {
			return false // the caller releases a frame that was not routed
		}
		a.onFrame(f)
		return true
	}
	var q *Queue[Frame]
	switch f.Type {
	case Response:
		q = a.responses
	case Ack, Event:
		q = a.events
	case ShuttingDown:
		q = a.shutdowns
	case Message:
		return a.AdmitMessage(f) == Admitted
	default:
		return false
	}
	return q.Push(f) == nil
}

// PayloadInto lets a transport that reads frames from a byte stream put a
// large payload straight where the node wants it, instead of into its read
// buffer and then a copy: a unary answer that a caller reads into a buffer
// of its own, say. Call it once a non-request frame's header is in hand
// and n payload bytes are still to come. A nil dst means no: read the frame
// as usual and route it. Otherwise dst has exactly n bytes; write the
// payload into it, then call done(nil), or done(err) when the connection
// failed first, and do not route the frame. done must be called once either
// way; until then the node waits for it, so the read should be bounded (a
// stream transport's frame timeout does that). header is only read during
// the call.
func (a *TransportAdapter) PayloadInto(t MessageType, header []byte, n int) (dst []byte, done func(err error)) {
	if a.into == nil || t == Message || a.closed.Load() {
		return nil, nil
	}
	return a.into(t, header, n)
}

// ConnClosed tells the node that the inbound connection id has ended and
// no more frames will carry it. A transport calls it once per connection
// whose frames it stamped with Frame.Conn, after the last of them was
// handed over.
func (a *TransportAdapter) ConnClosed(id ConnID) {
	if a.connClosed != nil && id != 0 {
		a.connClosed(id)
	}
}

// ConnTLS tells the node the TLS state of the inbound connection id, after
// its handshake and before the first frame stamped with id is handed over,
// so a handler can read who called it (the peer's verified certificates).
// A transport calls it at most once per connection, and still calls
// ConnClosed when the connection ends. state must not change afterwards.
func (a *TransportAdapter) ConnTLS(id ConnID, state *tls.ConnectionState) {
	if a.connTLS != nil && id != 0 && state != nil {
		a.connTLS(id, state)
	}
}

// Messages is the stream of admitted requests.
func (a *TransportAdapter) Messages() *Queue[InboundMessage] { return a.messages }

// Responses is the stream of unary responses.
func (a *TransportAdapter) Responses() *Queue[Frame] { return a.responses }

// Events is the stream of acks and events.
func (a *TransportAdapter) Events() *Queue[Frame] { return a.events }

// Shutdowns is the stream of ShuttingDown echoes.
func (a *TransportAdapter) Shutdowns() *Queue[Frame] { return a.shutdowns }

// SetSendErrorHandler installs the callback for frames that failed after admission.
func (a *TransportAdapter) SetSendErrorHandler(h SendErrorHandler) { a.onErr.Store(&h) }

// ReportSendError tells the node that an admitted frame was not written.
func (a *TransportAdapter) ReportSendError(target InstanceID, f Frame, err error) {
	if h := a.onErr.Load(); h != nil && *h != nil {
		(*h)(target, f, err)
	}
}

// SetPeerLostHandler installs the callback for lost peer connections.
func (a *TransportAdapter) SetPeerLostHandler(h PeerLostHandler) { a.onLost.Store(&h) }

// ReportPeerLost tells the node that a connection to peer ended: a reset,
// end of stream, a failed write or a failed dial. The node fails what waits
// on that peer at once. A transport reports each end once per connection;
// err should wrap ErrPeerUnreachable (it is wrapped here if it does not),
// and also ErrPeerShutdown when the peer had said it was shutting down, so
// that what waits on it fails as refused by a shutdown, not as lost.
func (a *TransportAdapter) ReportPeerLost(peer InstanceID, err error) {
	if !errors.Is(err, ErrPeerUnreachable) {
		err = fmt.Errorf("%w: %w", ErrPeerUnreachable, err)
	}
	if h := a.onLost.Load(); h != nil && *h != nil {
		(*h)(peer, err)
	}
}

// SetPeerConnectedHandler installs the callback for connections opened.
func (a *TransportAdapter) SetPeerConnectedHandler(h PeerConnectedHandler) { a.onConn.Store(&h) }

// ReportPeerConnected tells the node that a connection this transport
// dialed to peer is up. A transport reports each connection it opens; the
// node makes one event of those that follow each other without a loss.
func (a *TransportAdapter) ReportPeerConnected(peer InstanceID, transport TransportKey, remote string) {
	if h := a.onConn.Load(); h != nil && *h != nil {
		(*h)(peer, transport, remote)
	}
}

// Close closes the four streams. Requests still queued are dropped and their
// guards released, so they cannot hold a later drain open.
func (a *TransportAdapter) Close() {
	a.closed.Store(true)
	a.messages.Close(func(m InboundMessage) { m.Done() })
	a.responses.Close(nil)
	a.events.Close(nil)
	a.shutdowns.Close(nil)
}
