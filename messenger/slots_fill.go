package messenger

import (
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
)

// A large answer to an asynchronous call that gave a destination (into)
// can be read by the transport straight from the socket into that
// destination (ext.TransportAdapter.PayloadInto): the bytes are copied
// once, by the kernel, where the usual path copies them into the read
// buffer and then into the destination. The rendezvous pull of a big
// payload is what uses it.
//
// While the transport writes, the slot is filling: anything else that
// would end the call meanwhile (its context, a lost peer, shutdown) is
// held and delivered when the write stops, so the caller never hears that
// its call is over while its buffer is still being written. That delay is
// bounded by the read of one frame, which the transport's frame timeout
// bounds.

// payloadInto is the node's ext.TransportAdapter.PayloadInto: a successful
// Response to a call of this worker whose slot gave a destination.
func (m *Messenger) payloadInto(t ext.MessageType, header []byte, n int) ([]byte, func(error)) {
	if t != ext.Response {
		return nil, nil
	}
	id, outcome, _, err := parseResponseHeader(header)
	if err != nil || outcome != outcomeOK || id.Lo != uint64(m.wid) {
		return nil, nil // the usual path counts what is wrong with it
	}
	dst := m.slots.beginFill(id.Hi, n)
	if dst == nil {
		return nil, nil
	}
	return dst, func(err error) { m.slots.endFill(id, dst, err) }
}

// beginFill asks the call holding token for a destination of n bytes and
// marks its slot filling when it gives one.
func (t *slotTable) beginFill(token uint64, n int) []byte {
	s := t.live(token)
	if s == nil {
		return nil
	}
	defer s.mu.Unlock()
	if s.into == nil || s.done == nil || s.filling {
		return nil
	}
	dst := s.into(n)
	if len(dst) != n {
		return nil
	}
	s.filling = true
	return dst
}

// endFill ends the fill of the call named by id: it delivers what ended
// the call meanwhile if anything did, else the answer in dst, or err when
// the transport could not finish it.
func (t *slotTable) endFill(id msgwire.ResponseID, dst []byte, err error) {
	s := t.live(id.Hi)
	if s == nil {
		return // cannot happen: a filling slot is not freed
	}
	s.filling = false
	r := reply{payload: dst}
	switch {
	case s.holding:
		r = s.held
	case err != nil:
		r = reply{err: fmt.Errorf("%w: the connection carrying the answer failed: %w", ErrPeerUnreachable, err)}
	}
	s.held, s.holding = reply{}, false
	t.deliverLocked(s, id.Hi, r)
}
