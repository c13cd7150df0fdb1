package protocol_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

func samplePeer() ext.PeerInfo {
	return ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:5000")}}
}

func TestRegisterRequestRoundTrip(t *testing.T) {
	req := protocol.RegisterRequest{
		Peer: samplePeer(),
		Extensions: map[string]json.RawMessage{
			"services": json.RawMessage(`{"names":["llm","embed"]}`),
			"kv":       json.RawMessage(`{"size":3}`),
		},
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := protocol.DecodeRegisterRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Peer.InstanceID != req.Peer.InstanceID || len(got.Extensions) != 2 {
		t.Fatalf("decoded %+v", got)
	}
	if !bytes.Equal(got.Extensions["kv"], req.Extensions["kv"]) {
		t.Fatalf("kv payload %s", got.Extensions["kv"])
	}
}

func TestRegisterRequestRefusals(t *testing.T) {
	peer, _ := json.Marshal(samplePeer())
	cases := map[string]string{
		"not json":         `{`,
		"trailing":         `{"peer":` + string(peer) + `} {}`,
		"no peer":          `{"extensions":{}}`,
		"null peer":        `{"peer":null}`,
		"bad ext name":     `{"peer":` + string(peer) + `,"extensions":{"Bad/Name":{}}}`,
		"bad service":      `{"peer":` + string(peer) + `,"extensions":{"services":{"names":[".."]}}}`,
		"dup service":      `{"peer":` + string(peer) + `,"extensions":{"services":{"names":["a","a"]}}}`,
		"services not obj": `{"peer":` + string(peer) + `,"extensions":{"services":[1]}}`,
	}
	for name, body := range cases {
		if _, err := protocol.DecodeRegisterRequest([]byte(body)); !errors.Is(err, protocol.CodeBadRequest) {
			t.Errorf("%s: err %v, want bad_request", name, err)
		}
	}
}

func TestNullPayloadMeansNotOptedIn(t *testing.T) {
	peer, _ := json.Marshal(samplePeer())
	got, err := protocol.DecodeRegisterRequest([]byte(`{"peer":` + string(peer) + `,"extensions":{"kv":null,"x":{}},"future_field":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Extensions["kv"]; ok || len(got.Extensions) != 1 {
		t.Fatalf("extensions %v", got.Extensions)
	}
}

func TestReadBodyLimit(t *testing.T) {
	if _, err := protocol.ReadBody(strings.NewReader(strings.Repeat("a", 11)), 10); !errors.Is(err, protocol.CodePayloadTooLarge) {
		t.Fatalf("err %v", err)
	}
	b, err := protocol.ReadBody(strings.NewReader("0123456789"), 10)
	if err != nil || len(b) != 10 {
		t.Fatalf("%q %v", b, err)
	}
}

func TestHubIDText(t *testing.T) {
	id := protocol.NewHubID()
	b, _ := json.Marshal(protocol.HeartbeatAnswer{OK: true, HubID: id})
	var a protocol.HeartbeatAnswer
	if err := json.Unmarshal(b, &a); err != nil || a.HubID != id {
		t.Fatalf("%s: %v", b, err)
	}
	b, _ = json.Marshal(protocol.HeartbeatAnswer{OK: false})
	if string(b) != `{"ok":false}` {
		t.Fatalf("zero hub id not omitted: %s", b)
	}
}
