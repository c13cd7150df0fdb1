package ucx

import (
	"context"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgpeers"
)

// Queue sizes of the two background goroutines.
const (
	replyQueue  = 1024
	wireupQueue = 256
)

// reply is a control AM to send back to the sender of incarnation inc (a
// pong or a drain echo), or an endpoint to close (drop).
type reply struct {
	kind   uint8
	inc    uint64
	token  uint64 // of a pong
	header []byte // of a drain echo
	drop   *link
}

// queueReply hands r to the replier without waiting; a full queue drops
// it (the sender's deadline ends its wait).
func (t *Transport) queueReply(r reply) {
	select {
	case t.replies <- r:
	default:
		t.stats.replyDropped.Add(1)
	}
}

// replyLoop sends the replies. It is a goroutine of its own because a
// reply may need a new endpoint (ucp_ep_create), which waits for the
// progress goroutine.
func (t *Transport) replyLoop() {
	for {
		select {
		case <-t.stop:
			return
		case r := <-t.replies:
			t.sendReply(r)
		}
	}
}

func (t *Transport) sendReply(r reply) {
	if r.drop != nil {
		r.drop.close()
		return
	}
	l := t.linkFor(r.inc)
	if l == nil {
		t.stats.echoDropped.Add(1) // never said hello: no way back
		return
	}
	ref, err := l.acquire(1, 0)
	if err != nil {
		if r.kind == uint8(ext.ShuttingDown) {
			t.stats.echoDropped.Add(1)
		}
		return
	}
	var hdr []byte
	if r.kind == kindPong {
		hdr = appendToken(make([]byte, 0, incLen+tokenLen), t.incarnation, r.token)
	} else {
		hdr = appendFrameHeader(make([]byte, 0, incLen+len(r.header)), t.incarnation, r.header)
	}
	if err := t.w.SendAM(ref.id, AMIDBase+uint16(r.kind), hdr, nil, func(error) { ref.sendDone() }); err != nil {
		ref.sendDone()
	}
}

// wireupLoop creates the endpoints of peers registered with
// WithEagerEndpoints, one at a time, off Register's goroutine.
func (t *Transport) wireupLoop() {
	for {
		select {
		case <-t.stop:
			return
		case l := <-t.wireups:
			if r, err := l.acquire(0, 0); err == nil {
				t.stamp(r.l) // eager wireup counts as a use
			}
		}
	}
}

// resolvePing ends the wait of the health check that sent token.
func (t *Transport) resolvePing(token uint64) {
	t.pingMu.Lock()
	ch := t.pings[token]
	delete(t.pings, token)
	t.pingMu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// CheckHealth pings the peer on its endpoint (creating it if needed) and
// waits for the pong until ctx ends (5 s when ctx has no deadline). A
// failure matches ext.ErrPeerUnreachable; a peer not registered gets
// ext.ErrPeerNotRegistered, and a transport shut down
// ext.ErrTransportClosed.
func (t *Transport) CheckHealth(ctx context.Context, target ext.InstanceID) error {
	p := t.peer(target)
	if p == nil {
		return ext.ErrPeerNotRegistered
	}
	if t.core.Closing() || !t.started.Load() {
		return ext.ErrTransportClosed
	}
	ctx, cancel := msgpeers.WithDefaultTimeout(ctx, healthTimeout)
	defer cancel()
	token := t.pingSeq.Add(1)
	pong := make(chan struct{})
	t.pingMu.Lock()
	t.pings[token] = pong
	t.pingMu.Unlock()
	defer func() {
		t.pingMu.Lock()
		delete(t.pings, token)
		t.pingMu.Unlock()
	}()
	unreachable := func(err error) error {
		return fmt.Errorf("ucx: health of %v: %w: %w", target, ext.ErrPeerUnreachable, err)
	}
	ref, err := p.link.acquire(1, 0)
	if err != nil {
		return unreachable(err)
	}
	sent := make(chan error, 1)
	hdr := appendToken(make([]byte, 0, incLen+tokenLen), t.incarnation, token)
	if err := t.w.SendAM(ref.id, AMIDBase+uint16(kindPing), hdr, nil, func(err error) {
		ref.sendDone()
		sent <- err
	}); err != nil {
		ref.sendDone()
		return unreachable(err)
	}
	for {
		select {
		case <-pong:
			return nil
		case err := <-sent:
			if err != nil {
				return unreachable(err)
			}
			sent = nil
		case <-ref.failed:
			return unreachable(ref.failErr)
		case <-ctx.Done():
			return unreachable(ctx.Err())
		}
	}
}
