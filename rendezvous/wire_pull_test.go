package rendezvous

import (
	"encoding/json"
	"math"
	"testing"
)

// The hand-written pull request is byte for byte json.Marshal's (and
// serde_json's, which writes the fields in the same order).
func TestAppendPullRequestIsJSON(t *testing.T) {
	for _, r := range []pullRequest{
		{0, 0}, {1, 2}, {10, 9}, {12345678901234, 511},
		{math.MaxUint64, math.MaxUint32}, {math.MaxUint64 - 1, math.MaxUint32 - 1},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got := appendPullRequest(nil, r.TransferID, r.ChunkIndex)
		if string(got) != string(want) {
			t.Fatalf("%+v: wrote %s, json.Marshal writes %s", r, got, want)
		}
		back, ok := parsePullRequest(got)
		if !ok || back != r {
			t.Fatalf("%s: parsed %+v (ok %v), want %+v", got, back, ok, r)
		}
	}
}

// The fast reading takes only bodies that decode reads the same way, and
// leaves every other one to decode.
func TestParsePullRequestFallsBack(t *testing.T) {
	for _, b := range []string{
		``, `{}`, `null`, ` {"transfer_id":1,"chunk_index":2}`,
		`{"transfer_id":1,"chunk_index":2} `,
		`{"chunk_index":2,"transfer_id":1}`,
		`{"transfer_id": 1,"chunk_index":2}`,
		`{"transfer_id":01,"chunk_index":2}`,
		`{"transfer_id":1,"chunk_index":-2}`,
		`{"transfer_id":1.0,"chunk_index":2}`,
		`{"transfer_id":1e3,"chunk_index":2}`,
		`{"transfer_id":18446744073709551616,"chunk_index":2}`,
		`{"transfer_id":1,"chunk_index":4294967296}`,
		`{"transfer_id":1,"chunk_index":2,"x":3}`,
		`{"transfer_id":1,"chunk_index":}`,
		`{"transfer_id":,"chunk_index":2}`,
	} {
		if r, ok := parsePullRequest([]byte(b)); ok {
			t.Errorf("%q: read as %+v; it is not the usual shape", b, r)
		}
	}
}

// FuzzPullRequest checks the fast reading against decode: whatever it
// takes, decode takes too, to the same numbers.
func FuzzPullRequest(f *testing.F) {
	f.Add([]byte(`{"transfer_id":1,"chunk_index":2}`))
	f.Add([]byte(`{"transfer_id":18446744073709551615,"chunk_index":4294967295}`))
	f.Add([]byte(`{"transfer_id":0,"chunk_index":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parsePullRequest(b)
		if !ok {
			return
		}
		var want pullRequest
		if err := decode(b, &want); err != nil {
			t.Fatalf("%q: read as %+v, decode refuses it: %v", b, got, err)
		}
		if got != want {
			t.Fatalf("%q: read as %+v, decode reads %+v", b, got, want)
		}
	})
}

// Reading a pull request allocates nothing, and writing one only its body.
func TestPullRequestCodecAllocs(t *testing.T) {
	body := appendPullRequest(nil, 1<<40, 123)
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := parsePullRequest(body); !ok {
			t.Fatal("not read")
		}
	}); n != 0 {
		t.Fatalf("parsePullRequest: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = appendPullRequest(make([]byte, 0, 64), 1<<40, 123)
	}); n > 1 {
		t.Fatalf("appendPullRequest: %v allocations, want at most 1", n)
	}
}
