package quic_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/quic"
)

type started struct {
	tr      *quic.Transport
	adapter *ext.TransportAdapter
	info    ext.PeerInfo
}

// startQUIC starts a transport with its own adapter; the test's cleanup
// shuts it down unless the test already did.
func startQUIC(t *testing.T, opts ...quic.Option) *started {
	t.Helper()
	tr, err := quic.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	a := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{})
	ep, err := tr.Start(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tr.Shutdown()
		<-tr.Closed()
		a.Close()
	})
	return &started{tr: tr, adapter: a, info: ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{quic.Key: ep}}}
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// A listener that took over the port of a peer that left has another
// certificate than the one the peer's address pins: the dial fails the
// handshake, with an error that matches ErrPeerUntrusted and
// ErrPeerUnreachable, and queued frames fail with it.
func TestAnotherListenerOnTheAddressIsNotTrusted(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
	first, err := quic.New(quic.WithListenAddr(addr), quic.WithServerEndpoints(1))
	if err != nil {
		t.Fatal(err)
	}
	fa := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{})
	ep, err := first.Start(context.Background(), fa)
	if err != nil {
		t.Fatal(err)
	}
	first.Shutdown()
	<-first.Closed()
	fa.Close()
	impostor := startQUIC(t, quic.WithListenAddr(addr), quic.WithServerEndpoints(1))
	if impostor.tr.Fingerprint() == first.Fingerprint() {
		t.Fatal("two transports made the same certificate")
	}

	tx := startQUIC(t)
	failed := make(chan error, 1)
	tx.adapter.SetSendErrorHandler(func(_ ext.InstanceID, _ ext.Frame, err error) {
		select {
		case failed <- err:
		default:
		}
	})
	peer := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{quic.Key: ep}}
	if err := tx.tr.Register(peer); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = tx.tr.CheckHealth(ctx, peer.InstanceID)
	if !errors.Is(err, ext.ErrPeerUntrusted) || !errors.Is(err, ext.ErrPeerUnreachable) {
		t.Fatalf("health check against the impostor: %v, want ErrPeerUntrusted and ErrPeerUnreachable", err)
	}
	if _, err := tx.tr.Send(peer.InstanceID, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if !errors.Is(err, ext.ErrPeerUntrusted) || !errors.Is(err, ext.ErrPeerUnreachable) {
			t.Fatalf("the frame failed with %v, want ErrPeerUntrusted and ErrPeerUnreachable", err)
		}
	case <-ctx.Done():
		t.Fatal("the frame sent to the impostor never failed")
	}
	if n := impostor.adapter.Messages().Len(); n != 0 {
		t.Fatalf("the impostor received %d messages", n)
	}
}

// A peer that dies without a word (its sockets close, no CONNECTION_CLOSE
// is sent, as in a crash) is found by the idle timeout, not sooner: UDP
// has no FIN. The bound is the idle timeout (the smaller of the two ends'),
// and the loss is reported then.
func TestASilentPeerIsFoundByTheIdleTimeout(t *testing.T) {
	const idle = 500 * time.Millisecond
	rx := startQUIC(t)
	tx := startQUIC(t, quic.WithIdleTimeout(idle), quic.WithKeepAlive(100*time.Millisecond))
	lost := make(chan error, 4)
	tx.adapter.SetPeerLostHandler(func(_ ext.InstanceID, err error) { lost <- err })
	if err := tx.tr.Register(rx.info); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.tr.Send(rx.info.InstanceID, ext.Frame{Type: ext.Message, Header: []byte("h")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := rx.adapter.Messages().Pop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.Done()
	died := time.Now()
	quic.Vanish(rx.tr)
	select {
	case err := <-lost:
		d := time.Since(died)
		if !errors.Is(err, ext.ErrPeerUnreachable) {
			t.Fatalf("loss reported as %v", err)
		}
		// quic-go waits at least three probe timeouts; on loopback that
		// is far below the idle timeout.
		if d < idle/2 || d > idle+2*time.Second {
			t.Fatalf("a silent peer was reported lost after %v, want about the idle timeout %v", d, idle)
		}
		t.Logf("silent peer found after %v (idle timeout %v)", d, idle)
	case <-ctx.Done():
		t.Fatal("the silent peer was never reported lost")
	}
}
