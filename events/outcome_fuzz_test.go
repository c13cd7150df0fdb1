package events

import (
	"bytes"
	"errors"
	"testing"
)

func TestOutcomeRoundTrip(t *testing.T) {
	h := Handle{Hi: 0xdeadbeef, Lo: 3<<32 | 9}
	for _, c := range []struct {
		poisoned bool
		reason   string
	}{{false, ""}, {true, ""}, {true, "disk full"}, {true, string([]byte{0, 0xff, '\n'})}} {
		b := encodeOutcome(h, c.poisoned, c.reason)
		gh, gp, gr, err := decodeOutcome(b)
		if err != nil || gh != h || gp != c.poisoned || gr != c.reason {
			t.Errorf("round trip of (%v, %q): %s %v %q %v", c.poisoned, c.reason, gh, gp, gr, err)
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, 16), append(make([]byte, 16), 2)} {
		if _, _, _, err := decodeOutcome(bad); !errors.Is(err, ErrMalformedHandle) {
			t.Errorf("decodeOutcome(% x): %v, want ErrMalformedHandle", bad, err)
		}
	}
}

// FuzzDecodeOutcome: the _event_trigger and _event_trigger_request payload
// decoder never panics, and what it accepts is exactly what encodeOutcome
// writes for the decoded values.
func FuzzDecodeOutcome(f *testing.F) {
	h := Handle{Hi: 0x0102030405060708, Lo: 0x1112131415161718}
	f.Add(encodeOutcome(h, false, ""))
	f.Add(encodeOutcome(h, true, "weights missing"))
	f.Add(encodeOutcome(Handle{}, true, ""))
	f.Add(append(make([]byte, 16), 2))
	f.Add(make([]byte, 16))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, poisoned, reason, err := decodeOutcome(b)
		if err != nil {
			if !errors.Is(err, ErrMalformedHandle) {
				t.Fatalf("error %v does not match ErrMalformedHandle", err)
			}
			return
		}
		enc := encodeOutcome(h, poisoned, reason)
		if !bytes.Equal(enc, b) {
			t.Fatalf("% x decoded to (%s, %v, %q), which encodes as % x", b, h, poisoned, reason, enc)
		}
	})
}
