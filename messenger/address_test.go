package messenger_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// TestAdvertiseAddress: an entry added after start is in PeerInfo, travels
// in the handshake, and a peer finds it with PeerInfoOf. A key already
// there with another endpoint is refused, and an earlier PeerInfo is not
// changed under its holder.
func TestAdvertiseAddress(t *testing.T) {
	caller, server := pair(t, nil, nil)
	before := caller.PeerInfo()
	m := caller.Messenger()
	if err := m.AdvertiseAddress("test-key", []byte("ep")); err != nil {
		t.Fatal(err)
	}
	if _, ok := before.Address["test-key"]; ok {
		t.Fatal("AdvertiseAddress changed a PeerInfo handed out before it")
	}
	if err := m.AdvertiseAddress("test-key", []byte("other")); err == nil {
		t.Fatal("a second endpoint for the same key was accepted")
	}
	if err := m.AdvertiseAddress("test-key", []byte("ep")); err != nil {
		t.Fatalf("the same endpoint again: %v", err)
	}
	if got := caller.PeerInfo().Address["test-key"]; !bytes.Equal(got, []byte("ep")) {
		t.Fatalf("PeerInfo entry = %q", got)
	}
	// The server learns the caller, entry included, from the handshake.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Handshake(ctx, server.InstanceID()); err != nil {
		t.Fatal(err)
	}
	info, ok := server.Messenger().PeerInfoOf(caller.WorkerID())
	if !ok || info.InstanceID != caller.InstanceID() || !bytes.Equal(info.Address["test-key"], []byte("ep")) {
		t.Fatalf("PeerInfoOf = %+v, %v", info, ok)
	}
	if _, ok := server.Messenger().PeerInfoOf(12345); ok {
		t.Fatal("PeerInfoOf found an unknown worker")
	}
}

// TestHelloKeepsOutOfBandEntries: a hello whose address lacks an entry of
// the PeerInfo registered for the same instance does not drop that entry.
// A Rust node greets with its messenger's address only, and its stream
// listener ("tcp-stream") is known from the PeerInfo exchanged out of
// band: the live interop run lost it and could not attach to Rust anchors.
func TestHelloKeepsOutOfBandEntries(t *testing.T) {
	caller, server := pair(t, nil, nil)
	info := caller.PeerInfo()
	full := info
	full.Address = ext.WorkerAddress{"out-of-band": []byte("ep")}
	for k, v := range info.Address {
		full.Address[k] = v
	}
	if err := server.Messenger().RegisterPeer(full); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := caller.Messenger().Handshakes()
	if err := caller.Messenger().Handshake(ctx, server.InstanceID()); err != nil {
		t.Fatal(err)
	}
	if caller.Messenger().Handshakes() == before {
		t.Fatal("no hello was sent")
	}
	got, ok := server.Messenger().PeerInfoOf(caller.WorkerID())
	if !ok || !bytes.Equal(got.Address["out-of-band"], []byte("ep")) {
		t.Fatalf("after the hello the server has %v", got.Address)
	}
	for k, v := range info.Address {
		if !bytes.Equal(got.Address[k], v) {
			t.Fatalf("entry %q = %q, want %q", k, got.Address[k], v)
		}
	}
}
