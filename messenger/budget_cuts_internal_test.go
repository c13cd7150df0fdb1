package messenger

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/mpread"
	"github.com/velo-go/velo/internal/msgwire"
)

// The reader's deadline parse was cut twice for speed (a 15-byte constant
// for the key's bytes.HasPrefix, two words for the wall's digits). The
// functions below are the code from before those cuts, kept only here, so
// that fuzzing can hold the quick forms to what they replaced.

func oldDeadlineValue(hb []byte) ([]byte, bool) {
	var first []byte
	switch {
	case len(hb) > 0 && hb[0]&0xf0 == 0x80 && hb[0] != 0x80:
		first = hb[1:]
	case len(hb) > 3 && hb[0] == 0xde && hb[1]|hb[2] != 0:
		first = hb[3:]
	}
	if bytes.HasPrefix(first, deadlineKey) {
		val := first[len(deadlineKey):]
		if len(val) >= 2 && val[0] == 0xd9 && int(val[1]) <= len(val)-2 {
			return val[2 : 2+int(val[1]) : 2+int(val[1])], true
		}
		r := mpread.New(val, msgwire.ErrMalformedHeader)
		v, err := r.Str()
		return v, err == nil
	}
	if !bytes.Contains(hb, deadlineKey) {
		return nil, false
	}
	return lookupHeader(hb, msgwire.DeadlineHeader)
}

func oldOnlyDeadline(hb []byte) bool {
	if len(hb) < 1+len(deadlineKey)+2 || hb[0] != 0x81 || !bytes.HasPrefix(hb[1:], deadlineKey) {
		return false
	}
	val := hb[1+len(deadlineKey):]
	return val[0] == 0xd9 && int(val[1]) == len(val)-2
}

func oldHeaderDeadlineAt(hb []byte, at *arrival) time.Time {
	v, ok := oldDeadlineValue(hb)
	if !ok {
		return time.Time{}
	}
	last := &at.last
	if n := int(last.nval); n != 0 && len(v) == n && string(v) == string(last.val[:n]) {
		return last.dl
	}
	dl := oldDeadlineOf(v, at)
	if !dl.IsZero() && len(v) <= len(last.val) {
		last.nval = uint8(copy(last.val[:], v))
	} else {
		last.nval = 0
	}
	return dl
}

func oldDeadlineOf(v []byte, at *arrival) time.Time {
	a, rest := v, []byte(nil)
	if i := bytes.IndexByte(v, ' '); i >= 0 {
		a, rest = v[:i], v[i+1:]
	}
	us, ok := parseDecimal(a, 15)
	if !ok {
		return time.Time{}
	}
	d := time.Duration(us) * time.Microsecond
	t := at.now()
	if rest != nil {
		last := &at.last
		if len(rest) == 0 || len(rest) != int(last.nwall) || string(rest) != string(last.wall[:len(rest)]) {
			w, ok := parseDecimal(rest, 16)
			if !ok {
				return time.Time{}
			}
			last.abs, last.absOK = at.untilMicro(int64(w), absBound)
			last.nwall = uint8(copy(last.wall[:], rest))
		}
		if last.absOK && last.abs < d {
			d = max(last.abs, d-maxSkewCut)
		}
	}
	last := &at.last
	if last.dl.IsZero() || d != last.d {
		last.d, last.dl = d, t.Add(d-time.Microsecond)
	}
	return last.dl
}

// FuzzDeadlineCutsMatchOld: on any bytes, cut at any points into the
// header maps of one batch, the quick forms find the same values, say
// the same of a deadline-only map, and give the same deadlines and leave
// the same remembered state as the code before the cuts. The header maps
// are also every prefix of the input, so the key and wall comparisons
// meet maps that end inside them.
func FuzzDeadlineCutsMatchOld(f *testing.F) {
	now := time.Unix(1_780_000_000, 123_456_789)
	w := strconv.FormatInt(now.Add(time.Second).UnixMicro(), 10)
	for _, vs := range [][]string{
		{"1000000 " + w, "1000000 " + w, "999999 " + w},
		{"1000000 " + w, "1000000 " + w[:15] + "x", "1000000 0" + w},
		{"1 1", "1 12", "1 1234567812345678", "1 1234567812345679"},
		{"1000000", "1000000 ", "x " + w},
	} {
		var in []byte
		for _, v := range vs {
			hb, err := EncodeHeaders(map[string]string{DeadlineHeader: v})
			if err != nil {
				f.Fatal(err)
			}
			in = append(in, byte(len(hb)))
			in = append(in, hb...)
		}
		f.Add(in)
	}
	hdr, err := parseRequestHeader(appendRequestHeaderDeadline(nil, UnaryResponse, ResponseID{}, "h", nil, now.Add(time.Second)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(append([]byte{byte(len(hdr.headers))}, hdr.headers...))
	f.Add(append([]byte{40, 0x81}, deadlineKey...))
	f.Add(append([]byte{40, 0x81}, deadlineKey[:14]...))
	near := append(append([]byte{0x81}, deadlineKey[:14]...), deadlineKey[14]^1, 0xd9, 1, '5') // a key that differs in its last byte
	f.Add(append([]byte{byte(len(near))}, near...))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The input is maps, each its length byte and its bytes; then
		// every prefix of the whole input is a map of its own too.
		var hbs [][]byte
		for p := b; len(p) > 0; {
			n := min(int(p[0]), len(p)-1)
			hbs = append(hbs, p[1:1+n:1+n])
			p = p[1+n:]
		}
		for i := range min(len(b), 40) {
			hbs = append(hbs, b[:i:i])
		}
		batch, oldBatch := arrivalAt(now), arrivalAt(now)
		for i, hb := range hbs {
			v, ok := deadlineValue(hb)
			ov, ook := oldDeadlineValue(hb)
			if ok != ook || !bytes.Equal(v, ov) {
				t.Fatalf("map %d %x: deadlineValue %q %v, before the cuts %q %v", i, hb, v, ok, ov, ook)
			}
			if got, want := onlyDeadline(hb), oldOnlyDeadline(hb); got != want {
				t.Fatalf("map %d %x: onlyDeadline %v, before the cuts %v", i, hb, got, want)
			}
			got, want := headerDeadlineAt(hb, &batch), oldHeaderDeadlineAt(hb, &oldBatch)
			if !got.Equal(want) || got.IsZero() != want.IsZero() || batch.last != oldBatch.last {
				t.Fatalf("map %d %x: deadline %v (state %+v), before the cuts %v (%+v)", i, hb, got, batch.last, want, oldBatch.last)
			}
		}
	})
}
