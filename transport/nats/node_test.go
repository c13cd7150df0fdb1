package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/nats"
)

func startVelo(t testing.TB, url string) *velo.Node {
	t.Helper()
	tr, err := nats.New(nats.WithURL(url))
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown(context.Background()) })
	if got, want := string(n.PeerInfo().Address[nats.Key]), nats.InboundSubject(nats.DefaultClusterID, n.InstanceID()); got != want {
		t.Fatalf("node advertises %q, want the subject of its instance %q", got, want)
	}
	return n
}

// Two velo nodes with only the NATS transport call each other.
func TestTwoNodesCallEachOther(t *testing.T) {
	srv := startServer(t)
	a, b := startVelo(t, srv.URL()), startVelo(t, srv.URL())
	for _, n := range []*velo.Node{a, b} {
		name := n.InstanceID().String()
		if err := n.Register(velo.UnaryHandler("who", func(c *velo.Context) ([]byte, error) {
			return append([]byte(name+":"), c.Payload...), nil
		})); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	for i, pair := range [][2]*velo.Node{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		for j := 0; j < 20; j++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := from.Unary(ctx, to.InstanceID(), "who", fmt.Appendf(nil, "%d-%d", i, j))
			cancel()
			if want := fmt.Sprintf("%s:%d-%d", to.InstanceID(), i, j); err != nil || string(resp) != want {
				t.Fatalf("call %d-%d: %q, %v; want %q", i, j, resp, err, want)
			}
		}
	}
}

// A peer that is gone (its node stopped without telling us, so its
// subscription is gone) reports nothing: NATS has no connection per peer
// to break, and the reference reports no loss either. A call to it fails
// at the caller's deadline, and a health check fails at once (NATS
// answers "no responders" for a subject nobody holds).
func TestDeadPeer(t *testing.T) {
	srv := startServer(t)
	a := startVelo(t, srv.URL())
	// b is a bare transport, so it can vanish without the goodbye a node
	// says at its shutdown.
	bnc := connect(t, srv.URL())
	b := startNode(t, nats.WithConn(bnc))
	if err := a.RegisterPeer(b.info); err != nil {
		t.Fatal(err)
	}
	bnc.Close() // the server drops b's subscriptions with its connection

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := a.Unary(ctx, b.id, "anything", nil)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call to a dead peer: %v, want the caller's deadline", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("call to a dead peer failed after %v, before its deadline: %v", d, err)
	}
}

// A request to a subject nobody holds makes the server answer "no
// responders" on the sender's subject (the request's reply): that is
// counted as such, not as a malformed frame.
func TestNoRespondersIsNotMalformed(t *testing.T) {
	srv := startServer(t)
	tx := startNode(t, nats.WithURL(srv.URL()))
	peer := ext.NewInstanceID()
	subject := nats.InboundSubject(nats.DefaultClusterID, peer)
	if err := tx.tr.Register(ext.PeerInfo{InstanceID: peer, Address: ext.WorkerAddress{nats.Key: []byte(subject)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.tr.Send(peer, seq(1, []byte("to nobody"))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for tx.tr.Stats().NoResponders == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: no \"no responders\" answer counted", tx.tr.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if s := tx.tr.Stats(); s.Malformed != 0 || s.NoResponders != 1 {
		t.Fatalf("stats %+v, want one no-responders answer and nothing malformed", s)
	}
}

// gatedDialer refuses the dials of one connection while it is closed, as
// a server that is down does, so a test decides when that connection
// comes back after a server restart. (A dial that blocks instead would
// hold nats.go's connection lock, and every publish with it, for as long
// as it blocks.)
type gatedDialer struct {
	mu     sync.Mutex
	closed bool
}

var errGateClosed = errors.New("test dialer: closed")

func (d *gatedDialer) close()  { d.mu.Lock(); d.closed = true; d.mu.Unlock() }
func (d *gatedDialer) reopen() { d.mu.Lock(); d.closed = false; d.mu.Unlock() }

func (d *gatedDialer) Dial(network, address string) (net.Conn, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, errGateClosed
	}
	return net.Dial(network, address)
}

// The broker buffers for a slow receiver, so the admission gate fills
// when the server is away instead: nats.go buffers publishes up to its
// reconnect buffer, then the lane's channel fills and sends wait in the
// gate. When the connection is back, everything arrives in order and the
// pending admissions resolve in order.
func TestBackpressureWhileServerAway(t *testing.T) {
	srv := startServer(t)
	port := srv.Port()
	rxnc := connect(t, srv.URL(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(20*time.Millisecond))
	dialer := &gatedDialer{}
	txnc := connect(t, srv.URL(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(20*time.Millisecond),
		natsgo.ReconnectBufSize(256<<10), natsgo.SetCustomDialer(dialer))
	rx := startNode(t, nats.WithConn(rxnc))
	tx := startNode(t, nats.WithConn(txnc), nats.WithChannelBytes(256<<10))
	if err := tx.tr.Register(rx.info); err != nil {
		t.Fatal(err)
	}

	dialer.close()
	reopened := false
	t.Cleanup(func() {
		if !reopened {
			dialer.reopen()
		}
	})
	srv.Stop()
	waitStatus(t, txnc, natsgo.RECONNECTING)

	payload := make([]byte, 16<<10)
	var pending []*ext.Admission
	sent := 0
	for len(pending) < 32 {
		out, err := tx.tr.Send(rx.id, seq(sent, payload))
		if err != nil {
			t.Fatal(err)
		}
		if a := out.Admission(); a != nil {
			pending = append(pending, a)
		} else if len(pending) > 0 {
			select {
			case <-pending[len(pending)-1].Done():
			default:
				t.Fatalf("send %d admitted while earlier sends wait", sent)
			}
		}
		sent++
		if sent > 10000 {
			t.Fatal("the channel never filled while the server was away")
		}
	}

	// The server comes back on its port; the receiver resubscribes first,
	// then the sender may reconnect and flush its buffer.
	startServer(t, func(o *server.Options) { o.Port = port })
	waitStatus(t, rxnc, natsgo.CONNECTED)
	if err := rxnc.Flush(); err != nil {
		t.Fatal(err)
	}
	dialer.reopen()
	reopened = true

	ctx := ctxT(t)
	for i := 0; i < sent; i++ {
		m, err := rx.adapter.Messages().Pop(ctx)
		if err != nil {
			t.Fatalf("after %d of %d frames: %v", i, sent, err)
		}
		if got := seqOf(m.Frame); got != i {
			t.Fatalf("frame %d has seq %d", i, got)
		}
		m.Done()
	}
	for i, a := range pending {
		if err := a.Wait(ctx); err != nil {
			t.Fatalf("pending send %d: %v", i, err)
		}
	}
}

// Unregister fails what is queued for the peer, reported to the adapter,
// and what waits in the gate; here the frames queue while the server is
// away.
func TestUnregisterFailsQueuedFrames(t *testing.T) {
	srv := startServer(t)
	dialer := &gatedDialer{}
	txnc := connect(t, srv.URL(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(20*time.Millisecond),
		natsgo.ReconnectBufSize(64<<10), natsgo.SetCustomDialer(dialer))
	rx := startNode(t, nats.WithURL(srv.URL()))
	tx := startNode(t, nats.WithConn(txnc), nats.WithChannelBytes(128<<10))
	var mu sync.Mutex
	failed := 0
	tx.adapter.SetSendErrorHandler(func(to ext.InstanceID, f ext.Frame, err error) {
		if to != rx.id || !errors.Is(err, ext.ErrConnectionClosed) {
			t.Errorf("failure report for %v: %v", to, err)
		}
		mu.Lock()
		failed++
		mu.Unlock()
	})
	if err := tx.tr.Register(rx.info); err != nil {
		t.Fatal(err)
	}
	dialer.close()
	t.Cleanup(dialer.reopen) // before the connection closes, should the test fail
	srv.Stop()
	waitStatus(t, txnc, natsgo.RECONNECTING)
	// Send until 8 sends wait while the writer is stuck for good: it is
	// once nats.go's reconnect buffer is full, and until then it may still
	// admit what waits.
	var pending []*ext.Admission
	for i := 0; ; i++ {
		out, err := tx.tr.Send(rx.id, seq(i, make([]byte, 16<<10)))
		if err != nil {
			t.Fatal(err)
		}
		if a := out.Admission(); a != nil {
			pending = append(pending, a)
		}
		if unresolved(pending) >= 8 && waitBuffered(t, txnc, 64<<10) && unresolved(pending) >= 8 {
			break
		}
		if i > 10000 {
			t.Fatal("the channel never filled while the server was away")
		}
	}
	pending = pending[len(pending)-unresolved(pending):]
	tx.tr.Unregister(rx.id)
	for i, a := range pending {
		if err := a.Wait(ctxT(t)); !errors.Is(err, ext.ErrConnectionClosed) {
			t.Fatalf("pending send %d: %v, want ErrConnectionClosed", i, err)
		}
	}
	if _, err := tx.tr.Send(rx.id, seq(0, nil)); !errors.Is(err, ext.ErrPeerNotRegistered) {
		t.Fatalf("send after unregister: %v", err)
	}
	tx.tr.Shutdown() // the writer has exited: every report is in
	mu.Lock()
	defer mu.Unlock()
	// The channel held at least 128 KiB of 16 KiB frames behind the
	// reconnect buffer, and every pending send failed too.
	if failed < len(pending)+7 {
		t.Fatalf("%d failure reports, want at least %d", failed, len(pending)+7)
	}
	if s := tx.tr.Stats(); s.SendFailed != uint64(failed) {
		t.Fatalf("SendFailed = %d, reports %d", s.SendFailed, failed)
	}
}

// unresolved counts the admissions not resolved yet; they resolve in
// order, so they are the last ones.
func unresolved(as []*ext.Admission) int {
	n := 0
	for _, a := range as {
		select {
		case <-a.Done():
		default:
			n++
		}
	}
	return n
}

// waitBuffered waits until nc buffers at least n bytes for the server:
// past its reconnect buffer a publish fails, and the writer waits for the
// server. The writer fills it by itself, so this is a bounded wait for a
// condition, not for time.
func waitBuffered(t testing.TB, nc *natsgo.Conn, n int) bool {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := nc.Buffered()
		if err != nil {
			t.Fatal(err)
		}
		if b >= n {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats.go buffers %d bytes, want %d", b, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func seq(i int, payload []byte) ext.Frame {
	return ext.Frame{Type: ext.Message, Header: fmt.Appendf(nil, "%08d", i), Payload: payload}
}

func seqOf(f ext.Frame) int {
	var n int
	fmt.Sscanf(string(f.Header), "%d", &n)
	return n
}

// waitStatus waits for a connection's status, which nats.go changes on
// its own goroutines; it reports through a status channel.
func waitStatus(t testing.TB, nc *natsgo.Conn, want natsgo.Status) {
	t.Helper()
	ch := nc.StatusChanged(want)
	defer nc.RemoveStatusListener(ch)
	if nc.Status() == want {
		return
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("connection status %v, want %v", nc.Status(), want)
	}
}
