package rendezvous

import (
	"encoding/json"
	"testing"
)

// Golden bodies of the control plane, written by hand from the
// reference's serde types (field order as declared, no spaces, enums
// externally tagged).
func TestGoldenBodies(t *testing.T) {
	h := DataHandle{Hi: 0xDEADBEEF12345678, Lo: 42}
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"handle", h, `{"hi":16045690981402826360,"lo":42}`},
		{"metadata request", handleRequest{Handle: DataHandle{Hi: 1, Lo: 2}}, `{"handle":{"hi":1,"lo":2}}`},
		{"metadata", Metadata{TotalLen: 1024, Refcount: 1}, `{"total_len":1024,"refcount":1,"pinned":false}`},
		{"ready", acquireAnswer{Ready: &ready{LeaseID: 1, TransferID: 2, TotalLen: 3, ChunkSize: 524288, ChunkCount: 1}},
			`{"Ready":{"lease_id":1,"transfer_id":2,"total_len":3,"chunk_size":524288,"chunk_count":1}}`},
		{"pull", pullRequest{TransferID: 7, ChunkIndex: 3}, `{"transfer_id":7,"chunk_index":3}`},
		{"release", leaseRequest{Handle: DataHandle{Hi: 1, Lo: 2}, LeaseID: 9}, `{"handle":{"hi":1,"lo":2},"lease_id":9}`},
		{"max handle", DataHandle{Hi: ^uint64(0), Lo: ^uint64(0)}, `{"hi":18446744073709551615,"lo":18446744073709551615}`},
		// An acquire without an offer is the body it always was.
		{"acquire", acquireRequest{Handle: DataHandle{Hi: 1, Lo: 2}}, `{"handle":{"hi":1,"lo":2}}`},
		{"acquire with an offer", acquireRequest{Handle: DataHandle{Hi: 1, Lo: 2}, Rdma: &rdmaOffer{Backends: []string{"ucx"}}},
			`{"handle":{"hi":1,"lo":2},"rdma":{"backends":["ucx"]}}`},
		{"rdma", acquireAnswer{Rdma: &rdmaAnswer{LeaseID: 5, Descriptor: byteArray{1, 1, 0, 255}, LeaseTimeoutMS: 30000}},
			`{"Rdma":{"lease_id":5,"descriptor":[1,1,0,255],"lease_timeout_ms":30000}}`},
		{"rdma, empty descriptor", acquireAnswer{Rdma: &rdmaAnswer{LeaseID: 5}}, `{"Rdma":{"lease_id":5,"descriptor":[],"lease_timeout_ms":0}}`},
	}
	for _, c := range cases {
		got, err := json.Marshal(c.v)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestDecodeAnswers(t *testing.T) {
	var a acquireAnswer
	if err := json.Unmarshal([]byte(`{"Ready":{"lease_id":1,"transfer_id":2,"total_len":3,"chunk_size":524288,"chunk_count":1}}`), &a); err != nil || a.Ready == nil || a.Ready.TotalLen != 3 {
		t.Fatalf("ready: %+v %v", a, err)
	}
	a = acquireAnswer{}
	if err := json.Unmarshal([]byte(`{"Rdma":{"lease_id":5,"descriptor":[1,2,3],"lease_timeout_ms":30000}}`), &a); err != nil || a.Rdma == nil || a.Rdma.LeaseID != 5 || a.Rdma.LeaseTimeoutMS != 30000 || string(a.Rdma.Descriptor) != "\x01\x02\x03" {
		t.Fatalf("rdma: %+v %v", a, err)
	}
	// An owner from before lease_timeout_ms: 0, no deadline.
	a = acquireAnswer{}
	if err := json.Unmarshal([]byte(`{"Rdma":{"lease_id":5,"descriptor":[ 0 , 255 ]}}`), &a); err != nil || a.Rdma == nil || a.Rdma.LeaseTimeoutMS != 0 || string(a.Rdma.Descriptor) != "\x00\xff" {
		t.Fatalf("rdma without a timeout: %+v %v", a, err)
	}
	// The offer is optional on the owner's side too.
	var ar acquireRequest
	if err := decode([]byte(`{"handle":{"hi":1,"lo":2}}`), &ar); err != nil || ar.Rdma != nil {
		t.Fatalf("acquire without an offer: %+v %v", ar, err)
	}
	if err := decode([]byte(`{"handle":{"hi":1,"lo":2},"rdma":{"backends":["ucx","nixl"]}}`), &ar); err != nil || ar.Rdma == nil || len(ar.Rdma.Backends) != 2 {
		t.Fatalf("acquire with an offer: %+v %v", ar, err)
	}
	// A later field is ignored: default means what the protocol did before.
	a = acquireAnswer{}
	if err := json.Unmarshal([]byte(`{"Ready":{"lease_id":1,"transfer_id":2,"total_len":0,"chunk_size":524288,"chunk_count":0,"later":true}}`), &a); err != nil || a.Ready == nil {
		t.Fatalf("unknown field: %v", err)
	}
	for _, bad := range []string{`{}`, `{"Ready":null}`, `{"Ready":{},"Rdma":{}}`, `{"Inline":{}}`, `[]`, `null`, `{"Ready":{"lease_id":-1}}`} {
		a = acquireAnswer{}
		if err := json.Unmarshal([]byte(bad), &a); err == nil {
			t.Errorf("%s decoded: %+v", bad, a)
		}
	}
	var req handleRequest
	for _, bad := range []string{`null`, `1`, `"x"`, ``, `{"handle":{"hi":1.5,"lo":2}}`} {
		if err := decode([]byte(bad), &req); err == nil {
			t.Errorf("request %q decoded", bad)
		}
	}
}

func TestHandleString(t *testing.T) {
	cases := map[DataHandle]string{
		{Hi: 0, Lo: 1}:                   "1",
		{Hi: 1, Lo: 2}:                   "18446744073709551618",
		{Hi: ^uint64(0), Lo: ^uint64(0)}: "340282366920938463463374607431768211455",
	}
	for h, s := range cases {
		if h.String() != s {
			t.Errorf("%+v: %s, want %s", h, h.String(), s)
		}
		got, err := ParseHandle(s)
		if err != nil || got != h {
			t.Errorf("parse %s: %+v %v", s, got, err)
		}
	}
	for _, bad := range []string{"", "-1", "+1", " 1", "1a", "340282366920938463463374607431768211456", "0x10", "1234567890123456789012345678901234567890"} {
		if _, err := ParseHandle(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseHandle(f *testing.F) {
	for _, s := range []string{"1", "18446744073709551618", "340282366920938463463374607431768211455", "", "-5", "99999999999999999999999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHandle(s)
		if err != nil {
			return
		}
		back, err := ParseHandle(h.String())
		if err != nil || back != h {
			t.Fatalf("%q → %+v → %q → %+v %v", s, h, h.String(), back, err)
		}
	})
}

func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{
		`{"handle":{"hi":1,"lo":2}}`, `{"handle":{"hi":1,"lo":2},"lease_id":9}`, `{"transfer_id":7,"chunk_index":3}`,
		`{"Ready":{"lease_id":1,"transfer_id":2,"total_len":3,"chunk_size":524288,"chunk_count":1}}`,
		`{"Rdma":{"lease_id":5,"descriptor":[1,2,3],"lease_timeout_ms":30000}}`,
		`{"Rdma":{"lease_id":5,"descriptor":[256]}}`, `{"handle":{"hi":1,"lo":2},"rdma":{"backends":["ucx"]}}`,
		`{"total_len":1024,"refcount":1,"pinned":false}`, `null`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var hr handleRequest
		_ = decode(b, &hr)
		var lr leaseRequest
		_ = decode(b, &lr)
		var pr pullRequest
		_ = decode(b, &pr)
		var md Metadata
		_ = decode(b, &md)
		var ar acquireRequest
		_ = decode(b, &ar)
		var a acquireAnswer
		if json.Unmarshal(b, &a) == nil {
			if (a.Ready == nil) == (a.Rdma == nil) {
				t.Fatalf("%q decoded to %d variants", b, 2)
			}
			if a.Ready != nil {
				_ = checkReady(a.Ready)
			}
		}
	})
}
