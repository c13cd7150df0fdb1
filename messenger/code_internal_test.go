package messenger

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
)

// TestErrorHeadersGolden pins the header map of an error Response:
// MessagePack, keys sorted, the code in decimal.
func TestErrorHeadersGolden(t *testing.T) {
	got := appendErrorHeaders(nil, NotFound, "rendezvous_not_found")
	want := []byte{0x82,
		0xa9, 'v', 'e', 'l', 'o', '-', 'c', 'o', 'd', 'e', 0xa1, '5',
		0xab, 'v', 'e', 'l', 'o', '-', 'r', 'e', 'a', 's', 'o', 'n',
		0xb4}
	want = append(want, "rendezvous_not_found"...)
	if !bytes.Equal(got, want) {
		t.Fatalf("headers\n got % x\nwant % x", got, want)
	}
	// The same map as EncodeHeaders writes it.
	enc, err := EncodeHeaders(map[string]string{CodeHeader: "5", ReasonHeader: "rendezvous_not_found"})
	if err != nil || !bytes.Equal(enc, want) {
		t.Fatalf("EncodeHeaders: % x (%v)", enc, err)
	}
	if got := appendErrorHeaders(nil, UserCodeMin+7, ""); !bytes.Equal(got, append([]byte{0x81, 0xa9}, append([]byte("velo-code"), append([]byte{0xa4}, "1007"...)...)...)) {
		t.Fatalf("code only: % x", got)
	}
	if c, r := parseErrorHeaders(want); c != NotFound || r != "rendezvous_not_found" {
		t.Fatalf("parse: %v %q", c, r)
	}
}

// TestParseErrorHeadersRejectsJunk: a code that is not plain decimal of
// 32 bits, or OK, reads as Unknown; a reason that is not a short name is
// dropped.
func TestParseErrorHeadersRejectsJunk(t *testing.T) {
	for _, code := range []string{"", "-1", "+5", " 5", "5 ", "0x5", "4294967296", "99999999999", "5.0", "0"} {
		hb, _ := EncodeHeaders(map[string]string{CodeHeader: code, ReasonHeader: "ok_reason"})
		if c, r := parseErrorHeaders(hb); c != Unknown || r != "" {
			t.Errorf("code %q: read %v %q, want Unknown", code, c, r)
		}
	}
	for _, reason := range []string{"Upper", "with space", "a/b", string(bytes.Repeat([]byte{'a'}, maxReason+1)), "é"} {
		hb, _ := EncodeHeaders(map[string]string{CodeHeader: "5", ReasonHeader: reason})
		if c, r := parseErrorHeaders(hb); c != NotFound || r != "" {
			t.Errorf("reason %q: read %v %q, want NotFound without a reason", reason, c, r)
		}
	}
	if c, _ := parseErrorHeaders([]byte{0x81, 0xa9}); c != Unknown {
		t.Errorf("a truncated map read as %v", c)
	}
	if c, _ := parseErrorHeaders(appendErrorHeaders(nil, 4294967295, "")); c != 4294967295 {
		t.Errorf("the largest code read as %v", c)
	}
}

func TestCodeString(t *testing.T) {
	for c, want := range map[Code]string{OK: "OK", NotFound: "NotFound", Unauthenticated: "Unauthenticated", 17: "Code(17)", UserCodeMin: "Code(1000)"} {
		if c.String() != want {
			t.Errorf("%d: %q, want %q", uint32(c), c.String(), want)
		}
	}
}

// FuzzParseErrorHeaders: any bytes parse without a panic to a code that
// is never OK, a reason that is empty or valid, and a code and reason that
// encode and parse back to themselves.
func FuzzParseErrorHeaders(f *testing.F) {
	f.Add(appendErrorHeaders(nil, NotFound, "rendezvous_not_found"))
	f.Add(appendErrorHeaders(nil, UserCodeMin, ""))
	f.Add([]byte{0x81, 0xa9, 'v', 'e', 'l', 'o', '-', 'c', 'o', 'd', 'e', 0xa2, '-', '1'})
	f.Add([]byte{0xde, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, r := parseErrorHeaders(b)
		if c == OK || (r != "" && !validReason(r)) {
			t.Fatalf("read %v %q", c, r)
		}
		if c2, r2 := parseErrorHeaders(appendErrorHeaders(nil, c, r)); c2 != c || r2 != r {
			t.Fatalf("round trip %v %q -> %v %q", c, r, c2, r2)
		}
		if s := strconv.FormatUint(uint64(c), 10); s == "" {
			t.Fatal("empty code")
		}
	})
}

// TestErrorfWraps: Errorf keeps what %w wrapped visible to errors.Is on
// this node, with one %w or several, and its text is fmt.Errorf's.
func TestErrorfWraps(t *testing.T) {
	e := Errorf(Unavailable, "relay: %w and %w", ErrShuttingDown, ErrLaneFull)
	if !errors.Is(e, ErrShuttingDown) || !errors.Is(e, ErrLaneFull) || e.Message() != "relay: velo: shutting down and velo: ordered lane is full" {
		t.Fatalf("%v", e)
	}
	if ErrorCode(NewError(OK, "not ok")) != Unknown {
		t.Fatal("a non-nil error reads as OK")
	}
	if Errorf(NotFound, "no %s", "x").Unwrap() != nil || ErrorCode(e) != Unavailable {
		t.Fatal("an Errorf without %w unwraps, or the code is lost")
	}
}
