package ucx

import (
	"github.com/velo-go/velo/ext"
)

// maxStrangers bounds the senders kept from their hello without being
// registered; past it one is forgotten (and its endpoint closed).
const maxStrangers = 1024

// amHandler is the handler of one AM kind. It runs on the worker's
// progress goroutine: it decodes, copies and queues, and never calls into
// the worker or the node (see inbox.go). A malformed AM is counted and
// dropped; the endpoint goes on.
func (t *Transport) amHandler(kind uint8) func(header, data []byte) {
	return func(header, data []byte) {
		h, err := decodeAMHeader(kind, header)
		if err != nil {
			t.refuse(false)
			return
		}
		switch kind {
		case kindPing:
			if len(data) != 0 {
				t.refuse(false)
				return
			}
			t.noted(h.inc)
			t.queueReply(reply{kind: kindPong, inc: h.inc, token: h.token()})
		case kindPong:
			if len(data) != 0 {
				t.refuse(false)
				return
			}
			t.noted(h.inc)
			t.resolvePing(h.token())
		case kindHello:
			e, err := decodeHello(h, data)
			if err != nil {
				t.refuse(false)
				return
			}
			t.noted(h.inc)
			t.learn(e)
		default:
			n := len(h.rest) + len(data)
			if n > t.o.eagerMax {
				t.refuse(true)
				return
			}
			buf := make([]byte, n)
			copy(buf, h.rest)
			copy(buf[len(h.rest):], data)
			t.in.push(inItem{typ: ext.MessageType(kind), inc: h.inc, buf: buf, hlen: len(h.rest)}, t.reapOn)
		}
	}
}

// refuse counts an inbound AM that was dropped.
func (t *Transport) refuse(tooLarge bool) {
	if tooLarge {
		t.stats.tooLarge.Add(1)
		t.core.Observe().Rejection(ext.RejectTooLarge)
		return
	}
	t.stats.malformed.Add(1)
	t.core.Observe().Rejection(ext.RejectMalformed)
}

// noted records the sender of a control AM for the reaper.
func (t *Transport) noted(inc uint64) {
	if t.reapOn {
		t.in.note(inc)
	}
}

// learn keeps the address of a sender that is not registered here, so
// that we can answer it. A registered peer's hello tells nothing new.
func (t *Transport) learn(e endpoint) {
	if e.incarnation == t.incarnation {
		return
	}
	t.mu.Lock()
	if t.byInc[e.incarnation] != nil || t.strangers[e.incarnation] != nil {
		t.mu.Unlock()
		return
	}
	var evicted *link
	if len(t.strangers) >= maxStrangers {
		for inc, l := range t.strangers {
			evicted = l
			delete(t.strangers, inc)
			break
		}
	}
	t.strangers[e.incarnation] = newLink(t, e, ext.InstanceID{})
	t.mu.Unlock()
	if evicted != nil {
		// Closing an endpoint calls into the worker, which this goroutine
		// (the progress goroutine) must not do: hand it to the replier.
		t.queueReply(reply{drop: evicted})
	}
}

// deliverLoop hands inbound frames to the node, in the order they came,
// and stamps their senders' endpoints for the reaper once per batch.
func (t *Transport) deliverLoop() {
	defer close(t.deliverer)
	var batch []inItem
	for {
		var slots senderSlots
		var ok bool
		batch, slots, ok = t.in.popAll(batch)
		if !ok {
			return
		}
		t.stampSenders(&slots)
		for i := range batch {
			t.deliver(batch[i])
			batch[i] = inItem{}
		}
		batch = batch[:0]
	}
}

func (t *Transport) deliver(it inItem) {
	f := ext.Frame{Type: it.typ, Header: it.buf[:it.hlen:it.hlen], Payload: it.buf[it.hlen:]}
	if t.core.Deliver(f) {
		// Refused by the drain: echo the header back as ShuttingDown, so the
		// caller fails now instead of at its deadline. f is still ours.
		t.queueReply(reply{kind: uint8(ext.ShuttingDown), inc: it.inc, header: f.Header})
	}
}

// stampSenders stamps the endpoints to the senders of a batch: each one
// in the slots, or all of them when the slots overflowed.
func (t *Transport) stampSenders(s *senderSlots) {
	if !t.reapOn || s.empty() {
		return
	}
	now := t.now()
	if s.overflow {
		for _, l := range t.allLinks() {
			l.touch(now)
		}
		return
	}
	for _, inc := range s.senders() {
		if l := t.linkFor(inc); l != nil {
			l.touch(now)
		}
	}
}

// allLinks is every link, registered and strangers.
func (t *Transport) allLinks() []*link {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*link, 0, len(t.peers)+len(t.strangers))
	for _, p := range t.peers {
		out = append(out, p.link)
	}
	for _, l := range t.strangers {
		out = append(out, l)
	}
	return out
}
