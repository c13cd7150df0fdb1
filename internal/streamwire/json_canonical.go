package streamwire

import (
	"math"
	"slices"
	"sync/atomic"
)

// The attach bodies in the form this package and serde_json write them:
// fields in declaration order, no spaces, plain integers and strings of
// printable ASCII without escapes. Every stream's attach reads one request
// at the owner and one answer at the producer, and the general reader
// (jsonObject) walks each body three times: a UTF-8 check, a syntax check,
// then the members. The canonical reader below reads such a body in one
// pass and gives up, at no cost beyond the bytes it looked at, on
// anything else; the caller then reads the body with the general reader,
// which also gives the errors. What it accepts is valid JSON and UTF-8
// with distinct keys, and it reads every value as jsonUint and jsonString
// do, so the two readers agree on every body the canonical one takes
// (FuzzCanonicalAttachMatchesGeneral).

// canonical is a cursor over a body that is read in its canonical form;
// bad says the body left that form.
type canonical struct {
	b   []byte
	i   int
	bad bool
}

// lit reads the bytes of s.
func (c *canonical) lit(s string) {
	if c.bad || len(c.b)-c.i < len(s) || string(c.b[c.i:c.i+len(s)]) != s {
		c.bad = true
		return
	}
	c.i += len(s)
}

// next says whether the next byte is ch, without reading it.
func (c *canonical) next(ch byte) bool { return !c.bad && c.i < len(c.b) && c.b[c.i] == ch }

// uint reads an unsigned integer of at most bits bits in JSON's grammar
// (no leading zero): what jsonUint accepts in a valid body.
func (c *canonical) uint(bits int) uint64 {
	if c.bad {
		return 0
	}
	start := c.i
	var v uint64
	for c.i < len(c.b) {
		d := c.b[c.i]
		if d < '0' || d > '9' {
			break
		}
		if v > (math.MaxUint64-uint64(d-'0'))/10 {
			c.bad = true
			return 0
		}
		v = v*10 + uint64(d-'0')
		c.i++
	}
	switch n := c.i - start; {
	case n == 0, n > 1 && c.b[start] == '0', bits < 64 && v > 1<<bits-1:
		c.bad = true
		return 0
	}
	return v
}

// str reads a string of printable ASCII with no escapes, as jsonString
// reads it.
func (c *canonical) str() string {
	if !c.next('"') {
		c.bad = true
		return ""
	}
	start := c.i + 1
	for j := start; j < len(c.b); j++ {
		switch ch := c.b[j]; {
		case ch == '"':
			c.i = j + 1
			return knownString(c.b[start:j])
		case ch < 0x20 || ch > 0x7e || ch == '\\':
			c.bad = true
			return ""
		}
	}
	c.bad = true
	return ""
}

// done says whether the whole body was read in canonical form.
func (c *canonical) done() bool { return !c.bad && c.i == len(c.b) }

// canonicalAttachRequest reads b as AttachRequest.AppendJSON writes it;
// ok is false when b is not in that form.
func canonicalAttachRequest(b []byte) (r AttachRequest, ok bool) {
	c := canonical{b: b}
	c.lit(`{"handle":{"hi":`)
	r.Handle.Hi = c.uint(64)
	c.lit(`,"lo":`)
	r.Handle.Lo = c.uint(64)
	c.lit(`},"session_id":`)
	r.SessionID = c.uint(64)
	c.lit(`,"stream_cancel_handle":{"hi":`)
	r.CancelHandle.Hi = c.uint(64)
	c.lit(`,"lo":`)
	r.CancelHandle.Lo = c.uint(64)
	c.lit(`},"supported_transport_keys":[`)
	var kb [4]string // the keys on the stack: sharedKeys keeps a copy
	keys := kb[:0]
	for !c.bad && !c.next(']') {
		if len(keys) > 0 {
			c.lit(",")
		}
		keys = append(keys, c.str())
	}
	c.lit("]")
	if !c.bad {
		r.SupportedTransportKeys = sharedKeys(keys)
	}
	if c.next(',') {
		c.lit(`,"lane_key":`)
		v := c.uint(64)
		r.LaneKey = &v
	}
	c.lit("}")
	if !c.done() {
		return AttachRequest{}, false
	}
	return r, true
}

// lastKeys is the list of transport keys the last canonical attach
// request offered.
var lastKeys atomic.Pointer[[]string]

// sharedKeys is keys as a slice to keep: the list of the last request when
// keys equal it, else a copy that becomes that list. An owner reads one
// request per stream, and every producer of a build offers the same keys:
// a fresh list per request was an allocation per stream. The requests'
// readers only read the list, so one slice may serve them all.
func sharedKeys(keys []string) []string {
	if p := lastKeys.Load(); p != nil && slices.Equal(*p, keys) {
		return *p
	}
	k := make([]string, len(keys)) // never nil, as jsonStrings makes it
	copy(k, keys)
	lastKeys.Store(&k)
	return k
}

// canonicalAttachResponse reads b as AttachResponse.AppendJSON writes an
// Ok answer; ok is false when b is not in that form (an Err answer is
// read by the general reader).
func canonicalAttachResponse(b []byte) (r AttachResponse, ok bool) {
	c := canonical{b: b}
	c.lit(`{"Ok":{"streaming_transport_key":`)
	r.TransportKey = c.str()
	c.lit(`,"heartbeat_interval_ms":`)
	r.HeartbeatIntervalMS = c.uint(64)
	c.lit(`,"routing_session_id":`)
	r.RoutingSessionID = c.uint(64)
	c.lit(`,"initial_credit":`)
	r.InitialCredit = uint32(c.uint(32))
	c.lit(`,"slot_byte_budget":`)
	r.SlotByteBudget = uint32(c.uint(32))
	if c.next(',') {
		c.lit(`,"lane":`)
		r.Lane = uint8(c.uint(8))
	}
	c.lit("}}")
	if !c.done() {
		return AttachResponse{}, false
	}
	return r, true
}
