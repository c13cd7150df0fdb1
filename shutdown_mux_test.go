package velo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/streaming"
)

// TestNodeShutdownSaysMuxGoodbye: a node that shuts down closes its mux
// while the messenger still carries it, so its peer hears the mux's
// goodbye: the peer's producer to the node ends as cancelled by its
// consumer (ErrCancelled), not as a consumer lost with its connection
// (ErrConsumerLost), and the peer's consumer of the node's producer reads
// ErrSenderDropped.
func TestNodeShutdownSaysMuxGoodbye(t *testing.T) {
	leaving, peer := node(t), node(t)
	if err := leaving.RegisterPeer(peer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := peer.RegisterPeer(leaving.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The peer consumes a stream from the leaving node...
	theirs, err := streaming.CreateAnchor[[]byte](peer.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	out, err := streaming.AttachAnchor[[]byte](ctx, leaving.Streams, theirs.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// ...and produces one to it.
	ours, err := streaming.CreateAnchor[[]byte](leaving.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	in, err := streaming.AttachAnchor[[]byte](ctx, peer.Streams, ours.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, s := range []*streaming.Sender[[]byte]{out, in} {
		if got := s.NegotiatedTransport(); got != muxwire.TransportKey {
			t.Fatalf("NegotiatedTransport = %q, want the mux", got)
		}
		if err := s.Send(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []*streaming.Anchor[[]byte]{theirs, ours} {
		if _, err := a.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := shutdownWithin(leaving, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.Cancelled():
	case <-ctx.Done():
		t.Fatal("the peer's producer never heard that the node left")
	}
	if cause := context.Cause(in.Context()); !errors.Is(cause, streaming.ErrCancelled) {
		t.Fatalf("the peer's producer ended with %v, want ErrCancelled from the mux goodbye", cause)
	}
	if _, err := theirs.Next(ctx); !errors.Is(err, streaming.ErrSenderDropped) {
		t.Fatalf("the peer's consumer read %v, want ErrSenderDropped", err)
	}
}
