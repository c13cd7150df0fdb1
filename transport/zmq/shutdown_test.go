package zmq_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/zmq"
)

// Frames that cannot be sent by the end of the teardown grace (the peer
// completed the handshake and stopped reading, so the socket buffers are
// full and a send is blocked) are reported failed, once each, with
// ErrTransportClosed, and Shutdown returns soon after the grace: closing
// the DEALER socket ends the blocked send.
func TestShutdownFailsWhatTheGraceCannotSend(t *testing.T) {
	ep, connc, _ := zmtpPeer(t)
	const grace = 200 * time.Millisecond
	tx := startNode(t, ext.NewInstanceID(), zmq.WithTeardownGrace(grace), zmq.WithChannelBytes(256<<20))
	var mu sync.Mutex
	failed := 0
	tx.adapter.SetSendErrorHandler(func(_ ext.InstanceID, _ ext.Frame, err error) {
		if !errors.Is(err, ext.ErrTransportClosed) {
			t.Errorf("failure report: %v, want ErrTransportClosed", err)
		}
		mu.Lock()
		failed++
		mu.Unlock()
	})
	target := ext.NewInstanceID()
	if err := tx.tr.Register(ext.PeerInfo{InstanceID: target, Address: ext.WorkerAddress{zmq.Key: []byte(ep)}}); err != nil {
		t.Fatal(err)
	}
	const n = 64 // 64 MiB: far more than both socket buffers hold
	for i := 0; i < n; i++ {
		if _, err := tx.tr.Send(target, ext.Frame{Type: ext.Message, Payload: make([]byte, 1<<20)}); err != nil {
			t.Fatal(err)
		}
	}
	zc := <-connc // connected, and never read
	defer zc.Close()
	start := time.Now()
	tx.tr.Shutdown()
	if d := time.Since(start); d > grace+time.Second {
		t.Fatalf("Shutdown took %v with a grace of %v", d, grace)
	}
	select {
	case <-tx.tr.Closed():
	default:
		t.Fatal("Closed is open after Shutdown returned")
	}
	mu.Lock()
	defer mu.Unlock()
	if failed == 0 || failed > n || uint64(failed) != tx.tr.Stats().SendFailed {
		t.Fatalf("%d reported failed (Stats: %d) of %d", failed, tx.tr.Stats().SendFailed, n)
	}
}

// A peer that restarts on the same endpoint is reached again: the lane
// sees its connection end, and the next frame dials a new one.
func TestPeerRestartIsReconnected(t *testing.T) {
	rx1 := startNode(t, ext.NewInstanceID())
	ep := string(rx1.info.Address[zmq.Key])
	tx := startNode(t, ext.NewInstanceID())
	tx.adapter.SetSendErrorHandler(func(ext.InstanceID, ext.Frame, error) {}) // frames sent across the restart may fail
	if err := tx.tr.Register(rx1.info); err != nil {
		t.Fatal(err)
	}
	send := func() {
		if _, err := tx.tr.Send(rx1.id, ext.Frame{Type: ext.Response, Header: []byte("h"), Payload: []byte("p")}); err != nil {
			t.Fatal(err)
		}
	}
	send()
	if _, err := rx1.adapter.Responses().Pop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	rx1.tr.Shutdown()
	rx2 := startNode(t, rx1.id, zmq.WithListen(ep))
	ctx := ctxT(t)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for rx2.adapter.Responses().Len() == 0 {
		send()
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the restarted peer was never reached")
		}
	}
	if d := tx.tr.Stats().Dials; d < 2 {
		t.Fatalf("Dials = %d, want a reconnect", d)
	}
	if err := tx.tr.CheckHealth(ctx, rx1.id); err != nil {
		t.Fatalf("health of the restarted peer: %v", err)
	}
}

// The ROUTER binds ipc:// endpoints too, and removes the socket file at
// shutdown.
func TestIPCEndpoint(t *testing.T) {
	path := t.TempDir() + "/velo.sock"
	rx := startNode(t, ext.NewInstanceID(), zmq.WithListen("ipc://"+path))
	if got := string(rx.info.Address[zmq.Key]); got != "ipc://"+path {
		t.Fatalf("advertised %q", got)
	}
	tx := startNode(t, ext.NewInstanceID())
	if err := tx.tr.Register(rx.info); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.tr.Send(rx.id, ext.Frame{Type: ext.Response, Header: []byte("over ipc")}); err != nil {
		t.Fatal(err)
	}
	f, err := rx.adapter.Responses().Pop(ctxT(t))
	if err != nil || string(f.Header) != "over ipc" {
		t.Fatalf("%q, %v", f.Header, err)
	}
	rx.tr.Shutdown()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file after shutdown: %v", err)
	}
}

// A node that stopped taking requests (its inbound queue full) does not
// hold up its transport's Shutdown: the reader blocked handing it a frame
// is left to the adapter's close, which releases it, and Closed closes
// within the reader bound.
func TestShutdownIsNotHeldByAFullInboundQueue(t *testing.T) {
	tr, err := zmq.New()
	if err != nil {
		t.Fatal(err)
	}
	id := ext.NewInstanceID()
	adapter := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{MessageQueue: 1})
	tr.BindInstance(id)
	ep, err := tr.Start(context.Background(), adapter)
	if err != nil {
		t.Fatal(err)
	}
	tx := startNode(t, ext.NewInstanceID())
	if err := tx.tr.Register(ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{zmq.Key: ep}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // one queued, one blocked in the reader, one behind it
		if _, err := tx.tr.Send(id, ext.Frame{Type: ext.Message, Header: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxT(t)
	for adapter.Messages().Len() < 1 { // the first is queued: the reader now blocks on the second
		if ctx.Err() != nil {
			t.Fatal("no request arrived")
		}
		runtime.Gosched()
	}
	done := make(chan struct{})
	go func() {
		tr.Shutdown()
		<-tr.Closed()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Shutdown waited for a reader blocked on a full inbound queue")
	}
	adapter.Close() // releases the blocked reader; goleak checks it ended
}
