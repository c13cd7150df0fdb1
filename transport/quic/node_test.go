package quic_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/transport/quic"
)

func quicNode(t *testing.T) (*velo.Node, *quic.Transport) {
	t.Helper()
	tr, err := quic.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n, tr
}

// Two nodes with only the QUIC transport call each other.
func TestTwoNodesCallEachOther(t *testing.T) {
	a, _ := quicNode(t)
	b, _ := quicNode(t)
	for _, n := range []*velo.Node{a, b} {
		name := n.InstanceID().String()
		if err := n.Register(velo.UnaryHandler("who", func(*velo.Context) ([]byte, error) { return []byte(name), nil })); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct{ from, to *velo.Node }{{a, b}, {b, a}} {
		got, err := c.from.Unary(ctx, c.to.InstanceID(), "who", nil)
		if err != nil {
			t.Fatalf("call from %v: %v", c.from.InstanceID(), err)
		}
		if string(got) != c.to.InstanceID().String() {
			t.Fatalf("answered by %q, want %v", got, c.to.InstanceID())
		}
	}
}

// A call in flight to a peer whose transport dies fails within 100 ms when
// QUIC says so (the dying end closes its connections).
func TestAKilledPeerFailsCallsInFlight(t *testing.T) {
	server, str := quicNode(t)
	client, _ := quicNode(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	if err := server.Register(velo.UnaryHandler("hold", func(*velo.Context) ([]byte, error) {
		entered <- struct{}{}
		<-release
		return nil, nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := client.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := client.Unary(ctx, server.InstanceID(), "hold", nil)
		done <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
	killed := time.Now()
	quic.Kill(str)
	select {
	case err := <-done:
		if d := time.Since(killed); d > 100*time.Millisecond {
			t.Fatalf("the call failed %v after the peer died, want within 100ms", d)
		}
		if !errors.Is(err, velo.ErrPeerUnreachable) {
			t.Fatalf("the call failed with %v, want ErrPeerUnreachable", err)
		}
	case <-ctx.Done():
		t.Fatal("the call to the dead peer never failed")
	}
}
