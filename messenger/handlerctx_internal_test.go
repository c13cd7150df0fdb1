package messenger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// In a synctest bubble the clock starts at 2000-01-01 00:00:00 UTC, Unix
// 946684800 s, and moves only when every goroutine of the bubble waits: the
// deadline written and read below is exact.

// TestDeadlineHeaderGolden pins the request header of a call with a
// deadline 1.5 s away, with no headers of its own, one, and fifteen (the
// deadline entry makes the sixteenth, so the map's count outgrows its one
// byte). The bytes are written out by hand.
func TestDeadlineHeaderGolden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dl := time.Now().Add(1500 * time.Millisecond)
		value := "1500000 946684801500000" // µs left, then the deadline in Unix µs
		entry := append([]byte{0xae}, "_velo_deadline"...)
		entry = append(append(entry, 0xd9, byte(len(value))), value...)
		prefix := []byte{
			1, 2, // schema, unary
			1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, // response id LE
			1, 0, 'h', // handler name
		}
		id := ResponseID{Lo: 1, Hi: 2}

		// No headers of the caller's.
		want := append(append(append([]byte{}, prefix...), 41, 0, 0x81), entry...)
		if got := appendRequestHeaderDeadline(nil, UnaryResponse, id, "h", nil, dl); !bytes.Equal(got, want) {
			t.Fatalf("no headers:\n got % x\nwant % x", got, want)
		}

		// One header: the count goes from 1 to 2, the caller's entry follows.
		hb := []byte{0x81, 0xa1, 'a', 0xa1, 'b'}
		want = append(append(append([]byte{}, prefix...), 45, 0, 0x82), entry...)
		want = append(want, 0xa1, 'a', 0xa1, 'b')
		got := appendRequestHeaderDeadline(nil, UnaryResponse, id, "h", hb, dl)
		if !bytes.Equal(got, want) {
			t.Fatalf("one header:\n got % x\nwant % x", got, want)
		}
		hdr, err := parseRequestHeader(got)
		if err != nil {
			t.Fatal(err)
		}
		h, err := DecodeHeaders(hdr.headers)
		if err != nil || h["a"] != "b" || h[DeadlineHeader] != value {
			t.Fatalf("decoded %v, %v", h, err)
		}

		// Fifteen headers: the map's count becomes 0xde 00 10.
		many := map[string]string{}
		for i := range 15 {
			many[fmt.Sprintf("k%02d", i)] = "v"
		}
		hb, err = EncodeHeaders(many)
		if err != nil {
			t.Fatal(err)
		}
		got = appendRequestHeaderDeadline(nil, UnaryResponse, id, "h", hb, dl)
		hdr, err = parseRequestHeader(got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(hdr.headers, append([]byte{0xde, 0, 16}, entry...)) {
			t.Fatalf("fifteen headers: % x", hdr.headers[:8])
		}
		h, err = DecodeHeaders(hdr.headers)
		if err != nil || len(h) != 16 || h[DeadlineHeader] != value {
			t.Fatalf("decoded %d entries, %v", len(h), err)
		}
		if len(got) > fixedHeaderLen+1+2+len(hb)+deadlineEntryMax {
			t.Fatalf("header of %d bytes outgrows the room reserved for it", len(got))
		}

		// No deadline: the header is the plain one.
		if got := appendRequestHeaderDeadline(nil, UnaryResponse, id, "h", hb, time.Time{}); !bytes.Equal(got, appendRequestHeader(nil, UnaryResponse, id, "h", hb)) {
			t.Fatal("a call without a deadline changed its header")
		}
	})
}

// TestHeaderDeadlineTrustsTheCallersClockWithinABound: the handler's
// deadline is the caller's own where the clocks agree (the transit is
// spent), arrival plus budget where the caller's clock is behind, and at
// most maxSkewCut earlier than arrival plus budget where it is ahead.
func TestHeaderDeadlineTrustsTheCallersClockWithinABound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		at := func(v string) time.Duration {
			hb, err := EncodeHeaders(map[string]string{DeadlineHeader: v, "x": "y"})
			if err != nil {
				t.Fatal(err)
			}
			dl := headerDeadline(hb)
			if dl.IsZero() {
				return -1
			}
			return dl.Sub(now)
		}
		wall := func(d time.Duration) string { return fmt.Sprint(now.Add(d).UnixMicro()) }
		for _, c := range []struct {
			value string
			want  time.Duration
		}{
			{"1000000 " + wall(time.Second), time.Second},                           // no transit
			{"1000000 " + wall(990*time.Millisecond), 990 * time.Millisecond},       // 10 ms transit: the caller's deadline
			{"1000000 " + wall(2*time.Second), time.Second},                         // caller's clock ahead: the budget
			{"1000000 " + wall(0), time.Second - maxSkewCut},                        // caller's clock behind by a second: cut by the bound only
			{"1000000", time.Second},                                                // budget only
			{"0", 0},                                                                // spent
			{"999999999999999", maxBudget},                                          // the largest
			{"", -1}, {" 1", -1}, {"1 ", -1}, {"-5", -1}, {"1e6", -1}, {"1  2", -1}, // malformed: no deadline
			{"1000000000000000", -1}, // 16 digits of budget
		} {
			want := c.want
			if want >= 0 {
				want -= time.Microsecond // the margin headerDeadline keeps
			}
			if got := at(c.value); got != want {
				t.Errorf("%q: deadline in %v, want %v", c.value, got, c.want)
			}
		}
		if !headerDeadline(nil).IsZero() {
			t.Error("no headers gave a deadline")
		}
	})
}

// TestHandlerContextDeadlineFiresOnTime: a context opened with a deadline
// ends exactly then, with context.DeadlineExceeded as its cause; one
// closed when its handler returns ends with context.Canceled and leaves
// nothing registered.
func TestHandlerContextDeadlineFiresOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m Messenger
		start := time.Now()
		hc := m.openHandlerCtx(ctxKey{caller: 7, token: 9}, start.Add(100*time.Millisecond))
		if dl, ok := hc.ctx.Deadline(); !ok || !dl.Equal(start.Add(100*time.Millisecond)) {
			t.Fatalf("deadline %v %v", dl, ok)
		}
		<-hc.ctx.Done()
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Fatalf("ended after %v, want 100ms", d)
		}
		if c := context.Cause(hc.ctx); c != context.DeadlineExceeded {
			t.Fatalf("cause %v", c)
		}
		m.closeHandlerCtx(hc)

		hc = m.openHandlerCtx(ctxKey{caller: 7, token: 10}, time.Time{})
		if _, ok := hc.ctx.Deadline(); ok {
			t.Fatal("a request without a deadline got one")
		}
		m.closeHandlerCtx(hc)
		if c := context.Cause(hc.ctx); c != context.Canceled {
			t.Fatalf("cause after the handler returned: %v", c)
		}
		if len(m.hctx.live) != 0 || len(m.hctx.byID) != 0 {
			t.Fatalf("left registered: %d live, %d by id", len(m.hctx.live), len(m.hctx.byID))
		}
	})
}

// TestCancelBeforeContextIsKept: a cancel that comes before its handler
// asks for a context is kept, so that the context is done when asked for;
// the tombstones are bounded, the oldest dropped first.
func TestCancelBeforeContextIsKept(t *testing.T) {
	var m Messenger
	key := func(i int) ctxKey { return ctxKey{caller: 3, token: uint64(i + 1)} }
	m.cancelCall(key(0))
	hc := m.openHandlerCtx(key(0), time.Time{})
	if c := context.Cause(hc.ctx); !errors.Is(c, ErrCallerCancelled) {
		t.Fatalf("cause %v, want ErrCallerCancelled", c)
	}
	m.closeHandlerCtx(hc)
	if len(m.hctx.tombs) != 0 {
		t.Fatal("a used tombstone was kept")
	}
	// Another connection's cancel names another request.
	m.cancelCall(ctxKey{conn: 5, caller: 3, token: 77})
	hc = m.openHandlerCtx(ctxKey{caller: 3, token: 77}, time.Time{})
	if hc.ctx.Err() != nil {
		t.Fatal("a cancel from another connection ended the context")
	}
	m.closeHandlerCtx(hc)

	for i := range maxTombstones + 1 {
		m.cancelCall(key(100 + i))
	}
	if len(m.hctx.tombs) != maxTombstones { // the one of conn 5 went with the oldest
		t.Fatalf("%d tombstones, want %d", len(m.hctx.tombs), maxTombstones)
	}
	if hc := m.openHandlerCtx(key(100), time.Time{}); hc.ctx.Err() != nil {
		t.Fatal("the oldest tombstone outlived the bound")
	}
	if hc := m.openHandlerCtx(key(100+maxTombstones), time.Time{}); !errors.Is(context.Cause(hc.ctx), ErrCallerCancelled) {
		t.Fatal("the newest tombstone was dropped")
	}
}

// TestContextAfterConnectionEnded: a handler that asks for its context
// after its connection ended gets one that is done, with ErrCallerLost;
// shutdown ends every context, and the ones asked for after it.
func TestContextAfterConnectionEnded(t *testing.T) {
	var m Messenger
	m.gate.connFor(11, 3)
	live := m.openHandlerCtx(ctxKey{conn: 11, caller: 3, token: 1}, time.Time{})
	other := m.openHandlerCtx(ctxKey{conn: 12, caller: 4, token: 1}, time.Time{}) // conn 12 is unknown: gone
	if !errors.Is(context.Cause(other.ctx), ErrCallerLost) {
		t.Fatalf("context on a gone connection: cause %v", context.Cause(other.ctx))
	}
	fire := m.openHandlerCtx(ctxKey{conn: 0, caller: 5}, time.Time{})
	m.onConnClosed(11)
	if !errors.Is(context.Cause(live.ctx), ErrCallerLost) {
		t.Fatalf("after its connection closed: cause %v", context.Cause(live.ctx))
	}
	if fire.ctx.Err() != nil {
		t.Fatal("another connection's close ended a context")
	}
	m.stopHandlerCtxs()
	if !errors.Is(context.Cause(fire.ctx), ErrShuttingDown) {
		t.Fatalf("at shutdown: cause %v", context.Cause(fire.ctx))
	}
	late := m.openHandlerCtx(ctxKey{caller: 5, token: 2}, time.Time{})
	if !errors.Is(context.Cause(late.ctx), ErrShuttingDown) {
		t.Fatalf("after shutdown: cause %v", context.Cause(late.ctx))
	}
}

// FuzzHeaderDeadline: reading a deadline out of any header bytes never
// panics, and the lookup agrees with the full decoder wherever that one
// accepts the map.
func FuzzHeaderDeadline(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x81, 0xae})
	hb, _ := EncodeHeaders(map[string]string{DeadlineHeader: "1000 946684801500000", "a": "b"})
	f.Add(hb)
	hb, _ = EncodeHeaders(map[string]string{DeadlineHeader: "12"})
	f.Add(hb)
	f.Add(append([]byte{0xde, 0, 1}, hb[1:]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		headerDeadline(b)
		v, ok := lookupHeader(b, DeadlineHeader)
		h, err := DecodeHeaders(b)
		if err != nil {
			return
		}
		want, has := h[DeadlineHeader]
		// The decoder keeps the last of duplicate keys, the lookup the first.
		if has && !ok || !has && ok || ok && string(v) != want && countKey(b) < 2 {
			t.Fatalf("lookup %q %v, decoder %q %v", v, ok, want, has)
		}
	})
}

// countKey counts how many times the deadline key occurs in b.
func countKey(b []byte) int { return bytes.Count(b, deadlineKey) }
