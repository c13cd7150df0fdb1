package streamsock

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testcert"
)

// tlsNet is tcpNet over mutual TLS.
type tlsNet struct{ server, client *tls.Config }

func newTLSNet(serverCN, clientCN string) tlsNet {
	ca := testcert.NewCA("test CA")
	client := testcert.Mutual(ca, ca.Issue(clientCN))
	client.ServerName = "127.0.0.1"
	return tlsNet{server: testcert.Mutual(ca, ca.Issue(serverCN)), client: client}
}

func (n tlsNet) Listen(ctx context.Context) (net.Listener, []byte, error) {
	ln, ep, err := tcpNet{}.Listen(ctx)
	if err != nil {
		return nil, nil, err
	}
	return tls.NewListener(ln, n.server), ep, nil
}

func (n tlsNet) Dial(ctx context.Context, ep []byte) (net.Conn, error) {
	conn, err := tcpNet{}.Dial(ctx, ep)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(conn, n.client)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, MarkUntrusted(err)
	}
	return tc, nil
}

// startWith starts a transport on nw whose adapter hears of each inbound
// connection's TLS state.
func startWith(t *testing.T, nw Network, states chan<- *tls.ConnectionState) *testNode {
	t.Helper()
	tr, err := New(nw, Config{Key: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{id: ext.NewInstanceID(), t: tr}
	n.a = ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{
		OnConnTLS: func(id ext.ConnID, st *tls.ConnectionState) { states <- st },
	})
	if _, err := tr.Start(context.Background(), n.a); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tr.Shutdown()
		<-tr.Closed()
		n.a.Close()
	})
	return n
}

// TestTLSConnIsNotASyscallConn: the inline write path writes to the raw
// file descriptor of a connection that is a syscall.Conn. A TLS
// connection must not be one, or frames would go out as plaintext under
// the record layer. Over TLS a lane therefore never writes inline, and the
// frames arrive whole; the listener hands the node the connection's TLS
// state once, before its frames.
func TestTLSConnIsNotASyscallConn(t *testing.T) {
	if _, ok := any((*tls.Conn)(nil)).(syscall.Conn); ok {
		t.Fatal("*tls.Conn is a syscall.Conn: the inline write path would bypass TLS")
	}
	nw := newTLSNet("server", "client")
	states := make(chan *tls.ConnectionState, 4)
	rx := startWith(t, nw, states)
	tx := startWith(t, nw, states)
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	stop := make(chan struct{})
	defer consume(rx, &got, stop).Wait()
	defer close(stop)
	// One at a time, so the writer parks between frames: on plain TCP
	// each of these sends would then write inline.
	for i := range 20 {
		if _, err := tx.t.Send(rx.id, seqMsg(i, nil)); err != nil {
			t.Fatal(err)
		}
		waitCount(t, &got, int64(i+1))
	}
	l := (*tx.t.peers.Load())[rx.id].lanes[0].Load()
	l.gate.Drain(func() int {
		if l.inlineOK || l.raw != nil {
			t.Errorf("a lane over TLS has inline writes on (inlineOK %v, raw %v)", l.inlineOK, l.raw != nil)
		}
		return 0
	})
	st := <-states
	if len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "client" {
		t.Fatalf("the node was handed the TLS state %+v, want the client's certificate", st)
	}
	if len(states) != 0 {
		t.Fatalf("%d more TLS states for one connection", len(states))
	}
}

// TestPlainFramesToATLSListenerAreRefused: a dialer that sends plain
// frames to a TLS listener fails its handshake; nothing reaches the node,
// and the failure is counted.
func TestPlainFramesToATLSListenerAreRefused(t *testing.T) {
	states := make(chan *tls.ConnectionState, 1)
	rx := startWith(t, newTLSNet("server", "client"), states)
	tx := newNode(t, Config{})
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.t.Send(rx.id, seqMsg(0, nil)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the handshake failure to be counted", func() bool { return rx.t.Stats().HandshakeFailures == 1 })
	if n := rx.a.Messages().Len(); n != 0 || len(states) != 0 {
		t.Fatalf("a refused connection reached the node: %d messages, %d TLS states", n, len(states))
	}
}

// TestMarkUntrusted: trust failures match ErrPeerUntrusted and keep their
// own error; others are left alone.
func TestMarkUntrusted(t *testing.T) {
	remote := &net.OpError{Op: "remote error", Err: tlsAlertForTest(48)}
	if err := MarkUntrusted(remote); !errors.Is(err, ext.ErrPeerUntrusted) || !errors.Is(err, remote) {
		t.Fatalf("an unknown_ca alert from the peer: %v", err)
	}
	if err := MarkUntrusted(tls.AlertError(42)); !errors.Is(err, ext.ErrPeerUntrusted) {
		t.Fatalf("a bad_certificate alert this end sent: %v", err)
	}
	for _, err := range []error{syscall.ECONNRESET, tls.AlertError(40), &net.OpError{Op: "remote error", Err: tlsAlertForTest(80)}} {
		if errors.Is(MarkUntrusted(err), ext.ErrPeerUntrusted) {
			t.Fatalf("%v marked untrusted", err)
		}
	}
}

// tlsAlertForTest stands for crypto/tls's unexported alert type: a uint8
// with an Error method.
type tlsAlertForTest uint8

func (a tlsAlertForTest) Error() string { return "tls: alert" }
