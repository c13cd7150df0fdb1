package quic_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/quic"
)

// With as many lanes as the peer has server sockets, each lane of one
// dialer dials a different socket, and each lane's frames arrive in order.
func TestLanesSpreadOverServerSockets(t *testing.T) {
	const lanes = 4
	rx := startQUIC(t, quic.WithServerEndpoints(lanes))
	tx := startQUIC(t, quic.WithLanes(lanes))
	var mu sync.Mutex
	remotes := map[string]bool{}
	tx.adapter.SetPeerConnectedHandler(func(_ ext.InstanceID, _ ext.TransportKey, remote string) {
		mu.Lock()
		remotes[remote] = true
		mu.Unlock()
	})
	if err := tx.tr.Register(rx.info); err != nil {
		t.Fatal(err)
	}
	const per = 50
	for i := 0; i < per; i++ {
		for l := 0; l < lanes; l++ {
			h := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(l)), uint32(i))
			if _, err := tx.tr.SendOnLane(rx.info.InstanceID, l, ext.Frame{Type: ext.Message, Header: h}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next := make([]uint32, lanes)
	for got := 0; got < lanes*per; got++ {
		m, err := rx.adapter.Messages().Pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l, s := binary.BigEndian.Uint32(m.Header), binary.BigEndian.Uint32(m.Header[4:])
		if s != next[l] {
			t.Fatalf("lane %d: seq %d, want %d", l, s, next[l])
		}
		next[l]++
		m.Done()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) != lanes {
		t.Fatalf("%d lanes dialed %d server sockets (%v), want one each", lanes, len(remotes), remotes)
	}
}

// Frames queued when Shutdown starts are written within the teardown
// grace, and the connection closes only after the peer read them: the
// reference's QUIC transport failed them (its known limitation).
func TestFramesQueuedAtTeardownArrive(t *testing.T) {
	rx := startQUIC(t)
	tx := startQUIC(t, quic.WithTeardownGrace(5*time.Second))
	tx.adapter.SetSendErrorHandler(func(_ ext.InstanceID, _ ext.Frame, err error) {
		t.Errorf("a queued frame failed: %v", err)
	})
	if err := tx.tr.Register(rx.info); err != nil {
		t.Fatal(err)
	}
	const n = 300 // 19 MiB: more than quic-go's windows, so most of it is still queued
	payload := bytes.Repeat([]byte{0x5a}, 64<<10)
	for i := 0; i < n; i++ {
		h := binary.BigEndian.AppendUint32(nil, uint32(i))
		if _, err := tx.tr.Send(rx.info.InstanceID, ext.Frame{Type: ext.Message, Header: h, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	tx.tr.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		m, err := rx.adapter.Messages().Pop(ctx)
		if err != nil {
			t.Fatalf("after %d of %d frames: %v", i, n, err)
		}
		if s := binary.BigEndian.Uint32(m.Header); s != uint32(i) || !bytes.Equal(m.Payload, payload) {
			t.Fatalf("frame %d arrived as seq %d, %d bytes", i, s, len(m.Payload))
		}
		m.Done()
	}
	select {
	case <-tx.tr.Closed():
	case <-ctx.Done():
		t.Fatal("Closed never closed")
	}
}

// A UDP buffer request above what the kernel allows is logged, naming the
// sysctl to raise.
func TestClampedUDPBuffersAreLogged(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	startQUIC(t, quic.WithUDPBuffers(1<<30, 1<<30), quic.WithServerEndpoints(1), quic.WithLogger(log))
	mu.Lock()
	defer mu.Unlock()
	out := logged.String()
	if !strings.Contains(out, "net.core.rmem_max") || !strings.Contains(out, "net.core.wmem_max") {
		t.Fatalf("no clamp warning for a 1 GiB request; log:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Waiting for the peer to take what was written costs nothing when the
// peer is there: a listener that says goodbye, and then the dialer that
// hears it, close at once rather than after their 1 s wait.
func TestShutdownWithALivePeerIsPrompt(t *testing.T) {
	rx := startQUIC(t)
	tx := startQUIC(t)
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
	for _, s := range []*started{rx, tx} {
		begin := time.Now()
		s.tr.Shutdown()
		<-s.tr.Closed()
		// The shared teardown alone waits for its goodbye writes; the
		// 1 s finish wait must not add to it.
		if d := time.Since(begin); d > 700*time.Millisecond {
			t.Fatalf("shutdown took %v with a live peer", d)
		}
	}
}
