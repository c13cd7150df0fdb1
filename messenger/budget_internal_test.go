package messenger

import (
	"bytes"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// TestArrivalReadsTheClockOncePerBatch: the requests of one batch share
// the time the first deadline among them was read at, however long the
// batch takes; a batch without deadlines reads no clock; the next batch
// reads it afresh.
func TestArrivalReadsTheClockOncePerBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		with, err := EncodeHeaders(map[string]string{DeadlineHeader: "1000000"})
		if err != nil {
			t.Fatal(err)
		}
		without, err := EncodeHeaders(map[string]string{"x": "y"})
		if err != nil {
			t.Fatal(err)
		}
		var at arrival
		if !headerDeadlineAt(without, &at).IsZero() || !at.t.IsZero() {
			t.Fatal("a request without a deadline read the clock")
		}
		start := time.Now()
		first := headerDeadlineAt(with, &at)
		time.Sleep(time.Second)
		if again := headerDeadlineAt(with, &at); !again.Equal(first) {
			t.Fatalf("the batch's second deadline %v, its first %v", again, first)
		}
		if want := start.Add(time.Second - time.Microsecond); !first.Equal(want) {
			t.Fatalf("deadline %v, want %v", first, want)
		}
		var next arrival
		if got := headerDeadlineAt(with, &next); !got.Equal(first.Add(time.Second)) {
			t.Fatalf("the next batch's deadline %v, want %v", got, first.Add(time.Second))
		}
	})
}

// TestUntilMicroIsSub: the integer distance to a Unix microsecond is the
// one time.Time.Sub gives, on a clock with nanoseconds, and it is
// reported exactly when it is under the bound.
func TestUntilMicroIsSub(t *testing.T) {
	now := time.Unix(1_780_000_000, 123_456_789)
	at := arrival{t: now, us: now.UnixNano() / 1e3, frac: time.Duration(now.UnixNano() % 1e3)}
	for _, off := range []time.Duration{-time.Hour, -maxSkewCut, -time.Microsecond, 0, 1, 999, time.Microsecond, time.Second, 3 * time.Second, maxBudget} {
		wall := now.Add(off).UnixMicro()
		want := time.UnixMicro(wall).Sub(now)
		for _, d := range []time.Duration{0, time.Second, 2 * time.Second, maxBudget} {
			got, ok := at.untilMicro(wall, d)
			if ok != (want < d) || ok && got != want {
				t.Errorf("offset %v, bound %v: %v %v, want %v (under: %v)", off, d, got, ok, want, want < d)
			}
		}
	}
	if _, ok := at.untilMicro(1e16-1, maxBudget); ok {
		t.Error("the latest wall came under the largest budget")
	}
}

// FuzzParseDecimal: the word-at-a-time reader takes exactly what
// strconv takes among plain digit strings.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"", "0", "12345678", "123456789", "1234567812345678", "1234567/", "12345678:", " 1", "99999999999999999", "0000000000000001"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseDecimal(b, 16)
		want, err := strconv.ParseUint(string(b), 10, 64)
		plain := len(b) > 0 && len(b) <= 16
		for _, c := range b {
			plain = plain && '0' <= c && c <= '9'
		}
		if ok != (plain && err == nil) || ok && got != want {
			t.Fatalf("%q: %d %v, want %d %v", b, got, ok, want, err)
		}
	})
}

// FuzzDeadlineValue: the quick lookup finds what lookupHeader finds, in
// any bytes.
func FuzzDeadlineValue(f *testing.F) {
	f.Add([]byte{})
	hb, _ := EncodeHeaders(map[string]string{DeadlineHeader: "1000 946684801500000", "a": "b"})
	f.Add(hb)
	hdr, err := parseRequestHeader(appendRequestHeaderDeadline(nil, UnaryResponse, ResponseID{}, "h", hb, time.Unix(1e9, 0)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(hdr.headers) // the deadline first, as a caller writes it
	f.Add(append([]byte{0xde, 0, 1}, deadlineKey...))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, ok := deadlineValue(b)
		want, wantOK := lookupHeader(b, DeadlineHeader)
		if ok != wantOK || !bytes.Equal(v, want) {
			t.Fatalf("%x: %q %v, want %q %v", b, v, ok, want, wantOK)
		}
	})
}

// FuzzAppendDecimal: the word-at-a-time digits are strconv's.
func FuzzAppendDecimal(f *testing.F) {
	for _, x := range []uint64{0, 1, 9, 10, 99, 100, 9999, 10000, 99999999, 1e8, 1e8 + 1, 123456789012345, 1e16 - 1, 1e16, 1<<64 - 1} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x uint64) {
		for _, v := range []uint64{x, x % 1e8, x % 1e16} {
			if got, want := appendDecimal([]byte("a"), v), strconv.AppendUint([]byte("a"), v, 10); !bytes.Equal(got, want) {
				t.Fatalf("%d: %q, want %q", v, got, want)
			}
		}
	})
}

// TestPooledRequestFrameLivesWhileRetained: a request built in a pooled
// buffer keeps its bytes while a transport holds a reference, however
// many requests are built meanwhile, and a transport that does not retain
// owners gets a frame of its own, with no owner.
func TestPooledRequestFrameLivesWhileRetained(t *testing.T) {
	id := ResponseID{Lo: 7, Hi: 9}
	dl := time.Unix(2e9, 0)
	want := requestFrame(UnaryResponse, id, "h", nil, []byte("first"))
	f := pooledRequestFrame(&peer{retains: true}, UnaryResponse, id, "h", nil, []byte("first"), time.Time{})
	if f.Owner == nil {
		t.Fatal("a small request to a retaining transport is not pooled")
	}
	if !bytes.Equal(f.Header, want.Header) || string(f.Payload) != "first" {
		t.Fatalf("pooled frame %q %q, want %q %q", f.Header, f.Payload, want.Header, want.Payload)
	}
	f.Owner.Retain() // the transport's reference
	f.Release()      // the caller's
	for range 100 {
		g := pooledRequestFrame(&peer{retains: true}, UnaryResponse, id, "h", nil, []byte("other"), dl)
		g.Release()
	}
	if string(f.Payload) != "first" {
		t.Fatalf("a retained request now says %q", f.Payload)
	}
	f.Release()
	if g := pooledRequestFrame(&peer{}, UnaryResponse, id, "h", nil, []byte("x"), dl); g.Owner != nil {
		t.Fatal("a transport that does not retain owners got a pooled frame")
	}
	big := make([]byte, sendBufSize)
	if g := pooledRequestFrame(&peer{retains: true}, UnaryResponse, id, "h", nil, big, dl); g.Owner != nil || len(g.Payload) != len(big) {
		t.Fatal("a request larger than a pooled buffer was pooled")
	}
}

// arrivalAt is an arrival whose clock read t.
func arrivalAt(t time.Time) arrival {
	return arrival{t: t, us: t.UnixNano() / 1e3, frac: time.Duration(t.UnixNano() % 1e3)}
}

// batchDeadlines checks that the values vs, read one after the other in
// one batch that arrived at now, each give the deadline it gives alone in
// a batch of its own.
func batchDeadlines(t *testing.T, now time.Time, vs []string) {
	t.Helper()
	batch := arrivalAt(now)
	for i, v := range vs {
		hb, err := EncodeHeaders(map[string]string{DeadlineHeader: v})
		if err != nil {
			t.Fatal(err)
		}
		alone := arrivalAt(now)
		want := headerDeadlineAt(hb, &alone)
		if got := headerDeadlineAt(hb, &batch); !got.Equal(want) || got.IsZero() != want.IsZero() {
			t.Fatalf("request %d (%q) of %q: deadline %v in the batch, %v alone", i, v, vs, got, want)
		}
	}
}

// TestBatchDeadlinesAreEachAlone: what a batch remembers of its last
// deadline (lastDeadline) changes no request's deadline: the same wall
// with other budgets, a new wall, a malformed value or one without a wall
// in between, and budgets on either side of the skew bound.
func TestBatchDeadlinesAreEachAlone(t *testing.T) {
	now := time.Unix(1_780_000_000, 123_456_789)
	wall := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMicro(), 10) }
	w := wall(time.Second)
	for _, vs := range [][]string{
		{"1000000 " + w, "1000000 " + w, "1000001 " + w, "999999 " + w, "1000000 " + w},
		{"1000000 " + w, "1000000 " + wall(2*time.Second), "1000000 " + w},
		{"1000000 " + w, "2000000 " + w, "900000 " + w, "1030000 " + w},   // the caller's deadline, then the budget less the bound
		{"1000000 " + w, "1000000 " + w[:len(w)-1] + "x", "1000000 " + w}, // a malformed wall of the same length
		{"1000000 " + w, "1000000", "1000000 " + w, "5 " + w},
		{"1000000 " + w, "1000000 ", "1000000 " + w, "x " + w, "1000000 " + w},
		{"1000000 " + w, "1000000 0" + w[1:], "1000000 " + w}, // the same wall in other digits
		{"1000000 " + wall(0), "1000000 " + wall(-time.Hour), "1000000 " + wall(time.Hour)},
		{"999999999999999 9999999999999999", "999999999999999 9999999999999999", "1 9999999999999999"},
	} {
		batchDeadlines(t, now, vs)
	}
}

// FuzzBatchDeadlines: any three values read in one batch give the
// deadlines they give alone.
func FuzzBatchDeadlines(f *testing.F) {
	now := time.Unix(1_780_000_000, 123_456_789)
	w := strconv.FormatInt(now.Add(time.Second).UnixMicro(), 10)
	f.Add("1000000 "+w, "999999 "+w, "2000000 "+w)
	f.Add("1000000 "+w, "1000000 0"+w, "1000000 "+w+"0")
	f.Add("1000000", "1000000 ", "1000000 "+w)
	f.Add("0 0", "0 1", "0 00")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		if !validUTF8(a, b, c) || len(a) > 64 || len(b) > 64 || len(c) > 64 {
			return // headers are UTF-8 (EncodeHeaders refuses others), and no deadline is longer
		}
		batchDeadlines(t, now, []string{a, b, c})
	})
}

// TestBatchDeadlineAllocs: reading the deadlines of a batch allocates
// nothing, as reading one does.
func TestBatchDeadlineAllocs(t *testing.T) {
	hb, err := EncodeHeaders(map[string]string{DeadlineHeader: "1000000 " + strconv.FormatInt(time.Now().Add(time.Second).UnixMicro(), 10)})
	if err != nil {
		t.Fatal(err)
	}
	var at arrival
	if n := testing.AllocsPerRun(100, func() { headerDeadlineAt(hb, &at) }); n != 0 {
		t.Fatalf("%v allocations per deadline, want 0", n)
	}
}

// TestRememberedDigitsAreTheSameBytes: a request buffer that remembers
// the digits of the last deadline it wrote writes the bytes a fresh one
// writes, through the same deadline again (the same time left, then less
// as the clock moves), a new one, an old one back, one past the digits a
// wall may have, and none.
func TestRememberedDigitsAreTheSameBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		var dd deadlineDigits
		for i, dl := range []time.Time{
			now.Add(time.Second), now.Add(time.Second), now.Add(2 * time.Second), now.Add(time.Second),
			now.Add(time.Second + time.Microsecond), time.UnixMicro(1e16), {}, now.Add(time.Second),
			time.UnixMicro(1e15 - 1), time.UnixMicro(1e15),
		} {
			if i == 2 || i == 8 {
				time.Sleep(time.Microsecond) // less time left, the same wall
			}
			id := ResponseID{Lo: 7, Hi: uint64(i)}
			want := appendRequestHeaderDeadline(nil, UnaryResponse, id, "h", nil, dl)
			if got := appendRequestHeaderDigits(nil, UnaryResponse, id, "h", nil, dl, &dd); !bytes.Equal(got, want) {
				t.Fatalf("deadline %d (%v): %x, want %x", i, dl, got, want)
			}
		}
	})
}

// TestPooledRequestWithDeadlineAllocs: a small request with a deadline is
// built in a pooled buffer with no allocation.
func TestPooledRequestWithDeadlineAllocs(t *testing.T) {
	p := &peer{retains: true}
	dl := time.Now().Add(time.Minute)
	payload := make([]byte, 64)
	if n := testing.AllocsPerRun(100, func() {
		f := pooledRequestFrame(p, FireAndForget, ResponseID{Lo: 1}, "sink", nil, payload, dl)
		f.Release()
	}); n != 0 {
		t.Fatalf("%v allocations per request, want 0", n)
	}
}

// TestPooledHeaderIsReused: a pooled request buffer that sends the same
// handler under the same deadline again writes only the time left, and
// its bytes are those of a fresh encoding every time: while the clock
// stands, with less time left by a microsecond (the same number of
// digits), and across a change in their number, which encodes anew.
func TestPooledHeaderIsReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := sendBufs.New().(*sendBuf)
		sb.refs.Store(1)
		dl := time.Now().Add(10*time.Second + 3*time.Microsecond)
		id := ResponseID{Lo: 9}
		check := func(what string) {
			t.Helper()
			want := appendRequestHeaderDeadline(nil, FireAndForget, id, "sink", nil, dl)
			if got := sb.header(FireAndForget, id, "sink", nil, dl); !bytes.Equal(got, want) {
				t.Fatalf("%s: %x, want %x", what, got, want)
			}
		}
		for range 100 {
			check("the clock standing")
		}
		for range 3 {
			time.Sleep(time.Microsecond)
			check("a microsecond less")
		}
		// Calls in flight under one context: each slot's id differs, and
		// only the id is written again.
		for i := range 3 {
			id = ResponseID{Lo: 9, Hi: uint64(i+1)<<16 | uint64(i)}
			check("another response id")
		}
		if sb.encodes != 1 {
			t.Fatalf("%d headers encoded whole for 106 requests under one deadline, want 1", sb.encodes)
		}
		time.Sleep(time.Microsecond) // 9,999,999 us left: a digit fewer
		check("a digit fewer")
		check("again")
		if sb.encodes != 2 {
			t.Fatalf("%d headers encoded whole after the digits shrank, want 2", sb.encodes)
		}
		// Anything else differing encodes anew.
		want := appendRequestHeaderDeadline(nil, FireAndForget, id, "other", nil, dl)
		if got := sb.header(FireAndForget, id, "other", nil, dl); !bytes.Equal(got, want) {
			t.Fatalf("another handler: %x, want %x", got, want)
		}
		hb, _ := EncodeHeaders(map[string]string{"k": "v"})
		want = appendRequestHeaderDeadline(nil, FireAndForget, id, "other", hb, dl)
		if got := sb.header(FireAndForget, id, "other", hb, dl); !bytes.Equal(got, want) {
			t.Fatalf("with headers: %x, want %x", got, want)
		}
		// Without a deadline, the header is the same bytes every time.
		want = appendRequestHeaderDeadline(nil, FireAndForget, id, "other", nil, time.Time{})
		for range 10 {
			if got := sb.header(FireAndForget, id, "other", nil, time.Time{}); !bytes.Equal(got, want) {
				t.Fatalf("no deadline: %x, want %x", got, want)
			}
		}
		if sb.encodes != 5 {
			t.Fatalf("%d headers encoded whole, want 5", sb.encodes)
		}
		// And a deadline after none is written in full.
		check("a deadline again")
		if sb.encodes != 6 {
			t.Fatalf("%d headers encoded whole, want 6", sb.encodes)
		}
	})
}
