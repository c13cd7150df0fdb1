package streaming

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// muxOn turns the mux on for newRemoteNode, which turns it off by default.
var muxOn = WithMux(MuxConfig{})

// pairWith builds a producer and a consumer node with the given options and
// introduces the producer to the consumer.
func pairWith(t *testing.T, prod, cons []ManagerOption) (producer, consumer *remoteNode) {
	t.Helper()
	producer, consumer = newRemoteNode(t, prod...), newRemoteNode(t, cons...)
	if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return producer, consumer
}

// streamOnce attaches to a fresh anchor of consumer, sends one item and
// finalizes, checks that the item and the end arrive, and returns the
// negotiated key.
func streamOnce(t *testing.T, producer, consumer *remoteNode) (string, error) {
	t.Helper()
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
	if err != nil {
		return "", err
	}
	defer s.Close()
	if err := s.Send(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "x" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	return s.NegotiatedTransport(), nil
}

// A mux-only node has no per-stream listener, streams with mux peers, and
// refuses producers that cannot use the mux with a clear reason.
func TestMuxOnly(t *testing.T) {
	producer, consumer := pairWith(t, []ManagerOption{muxOn}, []ManagerOption{muxOn, WithMuxOnly()})
	if consumer.sm.streamAddr() != nil {
		t.Fatal("a mux-only node has a per-stream listener")
	}
	if _, err := consumer.msg.PeerInfo().Address.Lookup(wire.TCPStreamKey); err == nil {
		t.Fatal("a mux-only node advertises tcp-stream")
	}
	got, err := streamOnce(t, producer, consumer)
	if err != nil || got != mux.WireKey {
		t.Fatalf("mux-only owner: %q, %v", got, err)
	}
	legacy, _ := pairWith(t, nil, nil) // mux off
	if err := legacy.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	_, err = streamOnce(t, legacy, consumer)
	if err == nil || !strings.Contains(err.Error(), "only over messenger-mux-v2") && !strings.Contains(err.Error(), "per-stream listener") {
		t.Fatalf("a producer without the mux attached to a mux-only node: %v", err)
	}
}

// A mux-only build with the mux disabled fails at build time.
func TestMuxOnlyNeedsTheMux(t *testing.T) {
	msg := newMessenger(t)
	_, err := NewNodeManager(msg, WithMuxOnly(), WithMux(MuxConfig{Disabled: true}))
	if !errors.Is(err, errMuxOnlyDisabled) {
		t.Fatalf("NewNodeManager = %v, want errMuxOnlyDisabled", err)
	}
	t.Setenv(muxDisableEnv, "1")
	if _, err := NewNodeManager(msg, WithMuxOnly()); !errors.Is(err, errMuxOnlyDisabled) {
		t.Fatalf("NewNodeManager with %s = %v", muxDisableEnv, err)
	}
}
