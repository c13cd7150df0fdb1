package velo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/streamx"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// An anchor of a node built WithStreamReservation ends at the node's
// unattached timeout, not at the 120 s default.
func TestWithStreamReservationSetsTheUnattachedTimeout(t *testing.T) {
	n := node(t, velo.WithStreamReservation(streaming.ReservationConfig{UnattachedTimeout: 30 * time.Millisecond}))
	if got := streamx.ReservationConfig(n.Streams); got.UnattachedTimeout != 30*time.Millisecond || got.AcceptWindow != streaming.DefaultReservationConfig().AcceptWindow {
		t.Fatalf("reservation config %+v", got)
	}
	a, err := streaming.CreateAnchor[[]byte](n.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Next(ctx); !errors.Is(err, streaming.ErrUnattachedTimeout) {
		t.Fatalf("Next = %v, want ErrUnattachedTimeout", err)
	}
}

func TestWithStreamHeartbeat(t *testing.T) {
	if got := streamx.HeartbeatInterval(node(t).Streams); got != 5*time.Second {
		t.Fatalf("default heartbeat %v", got)
	}
	if got := streamx.HeartbeatInterval(node(t, velo.WithStreamHeartbeat(250*time.Millisecond)).Streams); got != 250*time.Millisecond {
		t.Fatalf("heartbeat %v, want 250ms", got)
	}
}

// A mux-only node has no per-stream listener and advertises none; a
// mux-only node with the mux disabled does not start.
func TestWithMuxOnly(t *testing.T) {
	if streamx.StreamAddr(node(t).Streams) == nil {
		t.Fatal("a default node has no per-stream listener")
	}
	n := node(t, velo.WithMuxOnly())
	if streamx.StreamAddr(n.Streams) != nil {
		t.Fatal("a mux-only node listens for per-stream connections")
	}
	if _, err := n.PeerInfo().Address.Lookup("tcp-stream"); err == nil {
		t.Fatal("a mux-only node advertises a tcp-stream entry")
	}
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	bad, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithMuxOnly(), velo.WithMux(streaming.MuxConfig{Disabled: true}))
	if err == nil {
		bad.Shutdown(context.Background())
		t.Fatal("a mux-only node with the mux disabled started")
	}
}
