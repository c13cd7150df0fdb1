package messenger_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// Post never waits for a peer that stopped reading, where Send does: event
// completions use it, so an owner's Trigger never blocks on a stalled
// subscriber. The peer here accepts and never reads; small socket buffers
// and a small send channel make its lane fill after a few KiB.
func TestPostNeverWaitsForAStalledPeer(t *testing.T) {
	small := func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return err
	}
	ln, err := (&net.ListenConfig{Control: small}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(held)
				return
			}
			held <- c // never read
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range held {
			c.Close()
		}
	})
	tr, err := tcp.New(tcp.WithChannelBytes(4096), tcp.WithSocketBuffers(4096))
	must(t, err)
	sender, err := velo.New(context.Background(), velo.WithTransport(tr))
	must(t, err)
	t.Cleanup(func() { shutdownWithin(sender, 0) })
	stalled := ext.NewInstanceID()
	must(t, sender.RegisterPeer(ext.PeerInfo{InstanceID: stalled, Address: ext.WorkerAddress{tcp.Key: []byte(ln.Addr().String())}}))

	payload := make([]byte, 512)
	done := make(chan error, 1)
	go func() {
		for range 2000 { // 1 MiB: far more than the channel and the buffers hold
			if err := sender.Messenger().Post(stalled, "_note", payload); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	if err := recv(t, done, "2,000 posts to a stalled peer"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := sender.Send(ctx, stalled, "_note", payload); !errors.Is(err, velo.ErrRequestTimeout) {
		t.Fatalf("Send to the stalled peer: %v, want ErrRequestTimeout (its send channel is full)", err)
	}
}
