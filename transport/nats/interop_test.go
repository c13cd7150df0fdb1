package nats_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/nats"
)

// A receiver that drains as the reference's does (run_receive_loop:
// ShuttingDown, the request's header, published to the request's reply
// subject) reaches a Go sender: its echo arrives on the sender's
// shutdown stream.
func TestReferenceStyleDrainEchoReachesGoSender(t *testing.T) {
	srv := startServer(t)
	tx := startNode(t, nats.WithURL(srv.URL()))
	nc := connect(t, srv.URL())
	peer := ext.NewInstanceID()
	subject := nats.InboundSubject(nats.DefaultClusterID, peer)
	// The reference's drain gate, written against its wire format.
	sub, err := nc.Subscribe(subject, func(m *natsgo.Msg) {
		if m.Header.Get(nats.HeaderType) != "0" || m.Reply == "" {
			return
		}
		hlen := m.Header.Get(nats.HeaderLen)
		n := 0
		for _, c := range hlen {
			n = n*10 + int(c-'0')
		}
		nc.PublishMsg(&natsgo.Msg{
			Subject: m.Reply,
			Header:  natsgo.Header{nats.HeaderType: {"4"}, nats.HeaderLen: {hlen}},
			Data:    m.Data[:n],
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	if err := tx.tr.Register(ext.PeerInfo{InstanceID: peer, Address: ext.WorkerAddress{nats.Key: []byte(subject)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.tr.Send(peer, ext.Frame{Type: ext.Message, Header: []byte("request-header"), Payload: []byte("body")}); err != nil {
		t.Fatal(err)
	}
	echo, err := tx.adapter.Shutdowns().Pop(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if echo.Type != ext.ShuttingDown || string(echo.Header) != "request-header" || len(echo.Payload) != 0 {
		t.Fatalf("echo: type %v header %q payload %q", echo.Type, echo.Header, echo.Payload)
	}
}

// Frames that cannot be published by the end of the teardown grace (the
// server is away, nats.go's reconnect buffer full) are reported failed,
// once each, and Shutdown returns soon after the grace.
func TestShutdownFailsWhatTheGraceCannotPublish(t *testing.T) {
	srv := startServer(t)
	dialer := &gatedDialer{}
	txnc := connect(t, srv.URL(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(20*time.Millisecond),
		natsgo.ReconnectBufSize(32<<10), natsgo.SetCustomDialer(dialer))
	rx := startNode(t, nats.WithURL(srv.URL()))
	const grace = 200 * time.Millisecond
	tx := startNode(t, nats.WithConn(txnc), nats.WithTeardownGrace(grace))
	var mu sync.Mutex
	failed := 0
	tx.adapter.SetSendErrorHandler(func(to ext.InstanceID, f ext.Frame, err error) {
		if !errors.Is(err, ext.ErrTransportClosed) {
			t.Errorf("failure report: %v, want ErrTransportClosed", err)
		}
		mu.Lock()
		failed++
		mu.Unlock()
	})
	if err := tx.tr.Register(rx.info); err != nil {
		t.Fatal(err)
	}
	dialer.close()
	t.Cleanup(dialer.reopen)
	srv.Stop()
	waitStatus(t, txnc, natsgo.RECONNECTING)
	const n = 20 // 320 KiB: ten times the reconnect buffer
	for i := 0; i < n; i++ {
		if _, err := tx.tr.Send(rx.id, seq(i, make([]byte, 16<<10))); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	tx.tr.Shutdown()
	if d := time.Since(start); d > grace+2*time.Second {
		t.Fatalf("Shutdown took %v with a grace of %v", d, grace)
	}
	buffered, _ := txnc.Buffered()
	mu.Lock()
	defer mu.Unlock()
	// What nats.go took stays in its reconnect buffer (the connection is
	// the caller's); the rest was reported, each frame once.
	if published := buffered / (16 << 10); failed == 0 || failed+published != n {
		t.Fatalf("%d reported failed and about %d buffered (%d bytes), want %d in all", failed, published, buffered, n)
	}
}
