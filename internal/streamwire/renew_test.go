package streamwire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// _anchor_renew is Go-defined: these vectors fix its body.
func TestGoldenRenewRequest(t *testing.T) {
	cases := []struct {
		json string
		r    RenewRequest
	}{
		{`{"handles":[]}`, RenewRequest{Handles: []AnchorHandle{}}},
		{`{"handles":[{"hi":1,"lo":2}]}`, RenewRequest{Handles: []AnchorHandle{{1, 2}}}},
		{`{"handles":[{"hi":16045690981402826360,"lo":9223372036854775850},{"hi":7,"lo":1}]}`,
			RenewRequest{Handles: []AnchorHandle{{0xdeadbeef12345678, 1<<63 | 42}, {7, 1}}}},
	}
	for _, c := range cases {
		if got := c.r.AppendJSON(nil); string(got) != c.json {
			t.Errorf("encoded\n%s\nwant\n%s", got, c.json)
		}
		r, err := DecodeRenewRequest([]byte(c.json))
		if err != nil || !reflect.DeepEqual(r, c.r) {
			t.Errorf("decoded %+v, %v; want %+v", r, err, c.r)
		}
	}
	if got := (&RenewRequest{}).AppendJSON(nil); string(got) != `{"handles":[]}` {
		t.Errorf("nil list: %s", got)
	}
}

func TestRenewRequestRefused(t *testing.T) {
	over := `{"handles":[` + strings.Repeat(`{"hi":1,"lo":2},`, MaxRenewBatch) + `{"hi":1,"lo":2}]}`
	for _, b := range []string{
		`{}`, `{"handles":null}`, `{"handles":{}}`, `{"handles":[{"hi":1}]}`,
		`{"handles":[],"handles":[]}`, `[]`, over,
	} {
		if _, err := DecodeRenewRequest([]byte(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%.60s: %v, want ErrMalformed", b, err)
		}
	}
}

func FuzzDecodeRenewRequest(f *testing.F) {
	f.Add([]byte(`{"handles":[{"hi":1,"lo":2}]}`))
	f.Add([]byte(`{"x":1,"handles":[]}`))
	f.Add([]byte(`{"handles":[{"hi":1,"lo":2,"z":[1]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		r, err := DecodeRenewRequest(b)
		if !bytes.Equal(in, b) {
			t.Fatal("DecodeRenewRequest changed its input")
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if len(r.Handles) > MaxRenewBatch {
			t.Fatalf("%d handles accepted", len(r.Handles))
		}
		back, err := DecodeRenewRequest(r.AppendJSON(nil))
		if err != nil || len(back.Handles) != len(r.Handles) || (len(r.Handles) > 0 && !reflect.DeepEqual(back, r)) {
			t.Fatalf("round trip: %+v, %v; want %+v", back, err, r)
		}
	})
}
