package messenger

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/velo-go/velo/ext"
)

// A call from this node to itself.
//
// The node keeps an entry for itself in its peer table whose route is
// loopback: a transport in all but name that hands an outbound frame
// straight to this node's own TransportAdapter, as a transport's reader
// hands what it read. A request goes through admission (a draining node
// refuses its own new calls as it refuses a peer's), the identity gate,
// dispatch and the handler's Context exactly as a remote one does, and
// its answer comes back through onFrame to the waiting slot. Nothing is
// encoded or decoded beyond the frame the caller built, nothing touches a
// socket, and no goroutine is started for the hand-over: the caller's
// goroutine does the reader's part.
//
// What differs from a remote call, and why:
//   - The request carries selfConn, a connection id that no transport
//     stamps. The gate passes it; a request from any other connection
//     that claims to come from this node is dropped, since only the
//     loopback can speak for it.
//   - Nothing is staged: a payload that would be staged for a transport's
//     message size goes whole, there being no wire to bound it.
//   - An inline handler (WithInline) runs on the caller's goroutine,
//     inside the call, as it runs on a remote caller's connection reader.
//     An asynchronous call's callback still never runs inside UnaryAsync:
//     an answer that arrives before the send returned is delivered from a
//     goroutine of its own (holdAsync).
//   - A fire-and-forget message refused by this node's drain fails the
//     Send with ErrShuttingDown; a remote one is dropped by the peer after
//     the send returned, which the sender cannot know.
//   - Context.PeerTLS is nil: no connection carries the call.
//   - The transport metric families count nothing (no transport carried
//     it); the messenger and handler families count it as any request.

// loopback is the route of this node's entry for itself. It is an
// ext.OwnerRetainer: a frame's Owner is retained for as long as the
// receiving side reads it (the handler, or onFrame for an answer), so a
// caller that releases its reference once Send returns frees nothing that
// is still read.
type loopback struct{ m *Messenger }

// loopbackKey names the loopback route (it appears in no address).
const loopbackKey ext.TransportKey = "loopback"

// newSelfPeer is the node's entry for itself: greeted (there is no
// handshake to run with oneself) and proving (so that a caller that gives
// up sends its handler the cancel a Go peer gets).
func (m *Messenger) newSelfPeer() *peer {
	p := &peer{info: ext.PeerInfo{InstanceID: m.id}, primary: loopback{m}, retains: true, proves: true, loop: true}
	p.helloOK.Store(true)
	p.connected.Store(true)
	m.greet(m.wid)
	return p
}

func (l loopback) Key() ext.TransportKey                                        { return loopbackKey }
func (l loopback) Priority() int                                                { return math.MaxInt }
func (l loopback) Start(context.Context, *ext.TransportAdapter) ([]byte, error) { return nil, nil }
func (l loopback) Register(ext.PeerInfo) error                                  { return nil }
func (l loopback) Unregister(ext.InstanceID)                                    {}
func (l loopback) Lanes(ext.InstanceID) int                                     { return 1 }
func (l loopback) MaxMessageSize() int                                          { return math.MaxInt32 }
func (l loopback) CheckHealth(context.Context, ext.InstanceID) error            { return nil }
func (l loopback) SetObservability(ext.Observability)                           {}
func (l loopback) Shutdown()                                                    {}
func (l loopback) Closed() <-chan struct{}                                      { return closedChan }
func (l loopback) RetainsOwners() bool                                          { return true }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// SendOnLane ignores the lane: the hand-over is synchronous, so whatever
// one goroutine sends arrives in the order it was sent.
func (l loopback) SendOnLane(target ext.InstanceID, _ int, f ext.Frame) (ext.SendOutcome, error) {
	return l.Send(target, f)
}

// errLoopbackClosed: the node stopped, so its adapter takes nothing more.
var errLoopbackClosed = fmt.Errorf("%w: %w", ErrShuttingDown, ext.ErrTransportClosed)

// Send hands f to this node's adapter. The frame's Owner, if any, is
// retained for the receiving side, which releases it when done.
func (l loopback) Send(_ ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	if f.Owner != nil {
		f.Owner.Retain()
	}
	f.Urgent = false
	if f.Type != ext.Message {
		f.Conn = 0
		if !l.m.adapter.RouteFrame(f) {
			f.Release()
			return ext.SendOutcome{}, errLoopbackClosed
		}
		return ext.AdmittedOutcome, nil
	}
	f.Conn = l.m.selfConn
	return l.admit(f)
}

// loopBatches lends admit a one-message batch: the adapter hands its
// argument to the node's sink through a function value, so a batch on the
// stack would escape, one allocation per call.
var loopBatches = sync.Pool{New: func() any { return new([1]ext.InboundMessage) }}

// admit is what a transport's reader does with a request: admission, and
// on a drain's refusal the ShuttingDown echo, which fails the caller's
// slot with the error a remote caller gets.
func (l loopback) admit(f ext.Frame) (ext.SendOutcome, error) {
	b := loopBatches.Get().(*[1]ext.InboundMessage)
	b[0] = ext.InboundMessage{Frame: f}
	outcome, refused := l.m.adapter.AdmitBatch(b[:])
	n := len(refused)
	b[0] = ext.InboundMessage{}
	loopBatches.Put(b)
	switch {
	case outcome == ext.Disconnected:
		return ext.SendOutcome{}, errLoopbackClosed // the adapter released the frame
	case outcome == ext.Draining && n == 1:
		return ext.AdmittedOutcome, l.echo(f)
	}
	return ext.AdmittedOutcome, nil // admitted (a drain-exempt one too)
}

// echo answers a request this node's drain refused, as a transport
// answers a peer's: a ShuttingDown frame with the request's header, which
// onFrame turns into ErrShuttingDown for the waiting call. A request
// without a slot (fire-and-forget) has nobody to hear an echo, so its
// sender gets the error instead.
func (l loopback) echo(f ext.Frame) error {
	hdr, err := parseRequestHeader(f.Header)
	if err != nil || hdr.id.Hi == 0 {
		f.Release()
		return fmt.Errorf("%w: this node refused %q", ErrShuttingDown, hdr.handler)
	}
	// The echo takes over the reference taken for the request.
	if !l.m.adapter.RouteFrame(ext.Frame{Type: ext.ShuttingDown, Header: f.Header, Owner: f.Owner}) {
		f.Release()
		return errLoopbackClosed
	}
	return nil
}

// holdAsync keeps what completes the asynchronous call token while its
// request is handed over on the caller's goroutine: through the loopback
// the answer (an inline handler's, or a refusal) can come before Send
// returns, and the callback must not run inside UnaryAsync. It uses the
// slot's fill hold (slots_fill.go), which no loopback answer needs.
func (t *slotTable) holdAsync(token uint64) {
	if s := t.live(token); s != nil {
		s.filling = true
		s.mu.Unlock()
	}
}

// releaseAsync ends holdAsync. What completed the call meanwhile is
// delivered from a goroutine of its own (the slot stays held until then,
// so nothing else completes the call first); it reports whether there was
// such a completion.
func (t *slotTable) releaseAsync(token uint64) bool {
	s := t.live(token)
	if s == nil {
		return false
	}
	if !s.holding {
		s.filling = false
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	go func() {
		s := t.live(token)
		if s == nil {
			return // cannot happen: a held slot is not freed
		}
		r := s.held
		s.filling, s.held, s.holding = false, reply{}, false
		t.deliverLocked(s, token, r)
	}()
	return true
}
