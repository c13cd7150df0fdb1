package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
)

// The bodies of the event system messages. Their shapes are the
// reference's (lib/velo/src/messenger/events/messages.rs), JSON as
// serde_json writes them; all three messages are fire-and-forget.

// subscribeMsg asks the owner of an event to send _event_trigger to the
// subscriber when the event completes, or at once if it has.
//
// Sub is this implementation's addition (the reference ignores it): which
// of this node's subscriptions to the handle sent the message, so that a
// report that the message was not delivered fails that subscription and
// never a later one.
type subscribeMsg struct {
	Handle             u128           `json:"handle"`
	SubscriberWorker   uint64         `json:"subscriber_worker"`
	SubscriberInstance ext.InstanceID `json:"subscriber_instance"`
	Sub                uint64         `json:"velo_sub,omitempty"`
}

// completionMsg tells a subscriber how an event ended. Unknown and
// Refused are this implementation's additions (the reference ignores
// unknown fields), and both come with a poison reason, which is what a
// Rust subscriber sees. Unknown: the owner has no such event, so the wait
// fails with ErrUnknownEvent. Refused: the owner did not take the
// subscription (codeSubscriptionLimit: ErrSubscriptionLimit); the wait
// fails with that error, and it is not cached as the event's outcome.
type completionMsg struct {
	Handle   u128    `json:"handle"`
	Poisoned *string `json:"poisoned"`
	Unknown  bool    `json:"unknown,omitempty"`
	Refused  string  `json:"velo_refused,omitempty"`
}

// triggerRequestMsg asks the owner to trigger (or, with Poisoned, poison)
// an event. The owner acknowledges to ResponseID, a slot of the requester,
// and also sends the requester an _event_trigger, as to a subscriber.
type triggerRequestMsg struct {
	Handle            u128           `json:"handle"`
	RequesterWorker   uint64         `json:"requester_worker"`
	RequesterInstance ext.InstanceID `json:"requester_instance"`
	Poisoned          *string        `json:"poisoned"`
	ResponseID        *u128          `json:"response_id"`
}

// u128 is a 128-bit unsigned integer that JSON carries as a plain number,
// as serde_json writes a Rust u128 (encoding/json cannot: it goes through
// float64 or int64).
type u128 struct{ hi, lo uint64 }

func handleU128(h Handle) u128                { return u128{h.Hi, h.Lo} }
func (u u128) handle() Handle                 { return Handle{Hi: u.hi, Lo: u.lo} }
func responseU128(id msgwire.ResponseID) u128 { return u128{id.Hi, id.Lo} }
func (u u128) responseID() msgwire.ResponseID { return msgwire.ResponseID{Hi: u.hi, Lo: u.lo} }
func (u u128) big() *big.Int {
	return new(big.Int).Or(new(big.Int).Lsh(new(big.Int).SetUint64(u.hi), 64), new(big.Int).SetUint64(u.lo))
}
func (u u128) MarshalJSON() ([]byte, error) { return u.big().Append(nil, 10), nil }
func (u u128) String() string               { return u.big().String() }

var maxU128 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))

// UnmarshalJSON reads a non-negative integer of at most 128 bits. Only
// digits are accepted: no sign, fraction, exponent or quotes.
func (u *u128) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || len(b) > 39 {
		return fmt.Errorf("%w: %d-character number", ErrMalformedHandle, len(b))
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return fmt.Errorf("%w: %q is not a u128", ErrMalformedHandle, b)
		}
	}
	v, ok := new(big.Int).SetString(string(b), 10)
	if !ok || v.Cmp(maxU128) > 0 {
		return fmt.Errorf("%w: %s does not fit 128 bits", ErrMalformedHandle, b)
	}
	lo := new(big.Int).And(v, new(big.Int).SetUint64(^uint64(0)))
	u.hi, u.lo = new(big.Int).Rsh(v, 64).Uint64(), lo.Uint64()
	return nil
}

func strPtr(poisoned bool, reason string) *string {
	if !poisoned {
		return nil
	}
	return &reason
}

// mustJSON writes a body as serde_json would: no HTML escapes, and U+2028
// and U+2029 as they are (encoding/json always escapes those two).
func mustJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("events: encode: " + err.Error()) // the bodies have no values that fail
	}
	return unescapeLineSeparators(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// unescapeLineSeparators turns the escapes \u2028 and \u2029 back into
// the characters. An escape is one only after an even run of backslashes.
func unescapeLineSeparators(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u202`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			out = append(out, b[i])
			continue
		}
		if i+5 < len(b) && string(b[i+1:i+5]) == "u202" && (b[i+5] == '8' || b[i+5] == '9') {
			if b[i+5] == '8' {
				out = append(out, "\u2028"...)
			} else {
				out = append(out, "\u2029"...)
			}
			i += 5
			continue
		}
		out = append(out, b[i], b[i+1]) // an escape pair: keep both
		i++
	}
	return out
}
