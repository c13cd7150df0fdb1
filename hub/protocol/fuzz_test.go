package protocol_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// FuzzDecodeRegisterRequest: any body either decodes to a request that
// validates and survives a round trip, or is refused with bad_request.
// It never panics.
func FuzzDecodeRegisterRequest(f *testing.F) {
	peer, _ := json.Marshal(ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{"tcp": []byte("h:1")}})
	f.Add([]byte(`{"peer":` + string(peer) + `}`))
	f.Add([]byte(`{"peer":` + string(peer) + `,"extensions":{"services":{"names":["a","b.c"]},"kv":null}}`))
	f.Add([]byte(`{"peer":null}`))
	f.Add([]byte(`{"peer":{"instance_id":"x","worker_address":[300]}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := protocol.DecodeRegisterRequest(body)
		if err != nil {
			if !errors.Is(err, protocol.CodeBadRequest) {
				t.Fatalf("refusal is not bad_request: %v", err)
			}
			return
		}
		if req.Peer.InstanceID.IsZero() {
			t.Fatal("accepted a request without an instance id")
		}
		for name := range req.Extensions {
			if protocol.ValidateExtensionName(name) != nil {
				t.Fatalf("accepted extension name %q", name)
			}
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		back, err := protocol.DecodeRegisterRequest(again)
		if err != nil || back.Peer.InstanceID != req.Peer.InstanceID || len(back.Extensions) != len(req.Extensions) {
			t.Fatalf("round trip of %s: %v", again, err)
		}
	})
}

// FuzzServiceName: a name accepted is one path segment that a URL
// resolver keeps as it is.
func FuzzServiceName(f *testing.F) {
	for _, s := range []string{"llm", ".", "..", "a/b", "a%2F", "...", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if protocol.ValidateServiceName(name) != nil {
			return
		}
		if name == "." || name == ".." || len(name) > protocol.MaxServiceNameLen {
			t.Fatalf("accepted %q", name)
		}
		for _, c := range []byte(name) {
			if c == '/' || c == '%' || c == '?' || c == '#' || c <= ' ' || c >= 0x7f {
				t.Fatalf("accepted %q with %q", name, c)
			}
		}
	})
}

// FuzzParseError: any error answer parses without a panic.
func FuzzParseError(f *testing.F) {
	f.Add(409, []byte(`{"code":"busy","message":"m"}`))
	f.Add(502, []byte(`<html>`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := protocol.ParseError(status, body)
		_ = e.Error()
	})
}
