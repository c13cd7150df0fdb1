package messenger_test

import (
	"bytes"
	"context"
	"testing"
	"time"
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
