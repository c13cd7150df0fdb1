package grpc_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testcert"
	"github.com/velo-go/velo/transport/frametransporttest"
	vgrpc "github.com/velo-go/velo/transport/grpc"
	"github.com/velo-go/velo/transport/transporttest"
)

// mutual is the mutual-TLS config of a node called cn, signed by ca.
func mutual(ca *testcert.CA, cn string) *tls.Config { return testcert.Mutual(ca, ca.Issue(cn)) }

// rawCreds are the TLS credentials of a raw test client with a valid
// client certificate: the bytes it sends must reach the frame decoder.
func rawCreds(ca *testcert.CA) credentials.TransportCredentials {
	cfg := mutual(ca, "raw")
	cfg.ServerName = "127.0.0.1"
	return credentials.NewTLS(cfg)
}

// TestConformanceOverMutualTLS runs the messenger transport suite over
// gRPC with client certificates on every connection.
func TestConformanceOverMutualTLS(t *testing.T) {
	ca := testcert.NewCA("grpc conformance CA")
	f := factory(vgrpc.WithTLS(mutual(ca, "node")))
	f.DialRaw = dialRawStreamWith(rawCreds(ca))
	transporttest.Run(t, f)
}

// TestFrameConformanceOverMutualTLS runs the frame transport suite over
// grpc-stream with client certificates on every stream.
func TestFrameConformanceOverMutualTLS(t *testing.T) {
	ca := testcert.NewCA("grpc-stream conformance CA")
	cfg := mutual(ca, "node")
	var k killableFrames
	frametransporttest.Run(t, frametransporttest.Factory{
		New:       func(testing.TB) ext.FrameTransport { return k.new(vgrpc.WithFrameTLS(cfg)) },
		Kill:      k.kill,
		Confirms:  true,
		DialRaw:   rawFrameDialWith(rawCreds(ca)),
		Malformed: malformedFrames,
	})
}

func TestTLSConfigIsChecked(t *testing.T) {
	ca := testcert.NewCA("ca")
	old := mutual(ca, "a")
	old.MinVersion = tls.VersionTLS11
	if _, err := vgrpc.New(vgrpc.WithTLS(old)); err == nil {
		t.Fatal("a config that allows TLS 1.1 was taken")
	}
	if _, err := vgrpc.New(vgrpc.WithTLS(&tls.Config{})); err == nil {
		t.Fatal("a config with no certificate to serve was taken")
	}
	if _, err := vgrpc.NewFrameTransport(vgrpc.WithFrameTLS(&tls.Config{})).Listen("127.0.0.1:0"); err == nil {
		t.Fatal("a frame transport with no certificate to serve listened")
	}
	tr, err := vgrpc.New(vgrpc.WithTLS(mutual(ca, "a")))
	if err != nil {
		t.Fatal(err)
	}
	if c := tr.TLSConfig(); c == nil || c.MinVersion != tls.VersionTLS13 {
		t.Fatalf("TLSConfig = %v, want the config with TLS 1.3 as its floor", c)
	}
	if plain, _ := vgrpc.New(); plain.TLSConfig() != nil {
		t.Fatal("a plain transport reports a TLS config")
	}
}

// tlsGRPCNode is a node on one gRPC transport with a handler "who" that
// counts its runs.
type tlsGRPCNode struct {
	*velo.Node
	tr   *vgrpc.Transport
	runs atomic.Int64
}

func startTLSNode(t *testing.T, cfg *tls.Config) *tlsGRPCNode {
	t.Helper()
	tr, err := vgrpc.New(vgrpc.WithTLS(cfg))
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	node := &tlsGRPCNode{Node: n, tr: tr}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	if err := n.Register(velo.UnaryHandler("who", func(*velo.Context) ([]byte, error) {
		node.runs.Add(1)
		return []byte("ok"), nil
	})); err != nil {
		t.Fatal(err)
	}
	return node
}

func (n *tlsGRPCNode) call(t *testing.T, to *tlsGRPCNode) error {
	t.Helper()
	if err := n.RegisterPeer(to.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := n.Unary(ctx, to.InstanceID(), "who", nil)
	return err
}

// Two nodes that trust each other call over mutual TLS.
func TestMutualTLSCall(t *testing.T) {
	ca := testcert.NewCA("ca")
	a, b := startTLSNode(t, mutual(ca, "a")), startTLSNode(t, mutual(ca, "b"))
	if err := a.call(t, b); err != nil {
		t.Fatal(err)
	}
	if b.runs.Load() != 1 {
		t.Fatalf("the handler ran %d times, want 1", b.runs.Load())
	}
}

// A client whose certificate the server's CAs did not sign, or that has
// none, is refused in the handshake: its call fails, and the server's
// handler never runs.
func TestRefusedClientCertificateRunsNoHandler(t *testing.T) {
	ca, other := testcert.NewCA("ca"), testcert.NewCA("other")
	srv := startTLSNode(t, mutual(ca, "server"))
	stranger := mutual(other, "stranger")
	stranger.RootCAs = ca.Pool // it trusts the server; the server does not trust it
	// It serves a certificate (GetCertificate) but presents none as a
	// client (no Certificates).
	noCert := mutual(ca, "x")
	served := noCert.Certificates[0]
	noCert.Certificates = nil
	noCert.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &served, nil }
	for name, cfg := range map[string]*tls.Config{"foreign certificate": stranger, "no certificate": noCert} {
		t.Run(name, func(t *testing.T) {
			cl := startTLSNode(t, cfg)
			if err := cl.call(t, srv); err == nil {
				t.Fatal("a refused client's call succeeded")
			}
			if err := cl.tr.CheckHealth(context.Background(), srv.InstanceID()); err == nil {
				t.Fatal("a refused client's health check succeeded")
			}
		})
	}
	if n := srv.runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for refused clients", n)
	}
}

// A server whose certificate the client does not trust fails the dial
// with ErrPeerUntrusted, on the call, the health check and the frame
// transport's Dial.
func TestUntrustedServerFailsTheDial(t *testing.T) {
	ca, other := testcert.NewCA("ca"), testcert.NewCA("other")
	srv := startTLSNode(t, mutual(other, "impostor"))
	cl := startTLSNode(t, mutual(ca, "client"))
	if err := cl.call(t, srv); !errors.Is(err, ext.ErrPeerUntrusted) || !errors.Is(err, velo.ErrPeerUnreachable) {
		t.Fatalf("call to an untrusted server: %v, want ErrPeerUntrusted and ErrPeerUnreachable", err)
	} else if !strings.Contains(err.Error(), "x509") && !strings.Contains(err.Error(), "tls") {
		t.Errorf("%v does not say what TLS refused", err)
	}
	if err := cl.tr.CheckHealth(context.Background(), srv.InstanceID()); !errors.Is(err, ext.ErrPeerUntrusted) {
		t.Fatalf("health check of an untrusted server: %v, want ErrPeerUntrusted", err)
	}

	ln, err := vgrpc.NewFrameTransport(vgrpc.WithFrameTLS(mutual(other, "impostor"))).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = vgrpc.NewFrameTransport(vgrpc.WithFrameTLS(mutual(ca, "client"))).Dial(ctx, ln.Entry(), ext.StreamRoute{AnchorID: 1, SessionID: 2})
	if !errors.Is(err, ext.ErrPeerUntrusted) {
		t.Fatalf("frame Dial of an untrusted server: %v, want ErrPeerUntrusted", err)
	}
}

// A frame stream from a client the listener's CAs refuse fails its Dial,
// and no inbound stream of it reaches the node.
func TestFrameRefusedClientCertificateAcceptsNothing(t *testing.T) {
	ca, other := testcert.NewCA("ca"), testcert.NewCA("other")
	ln, err := vgrpc.NewFrameTransport(vgrpc.WithFrameTLS(mutual(ca, "consumer"))).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		in, err := ln.Accept()
		if in != nil {
			in.Close()
			err = errors.New("an inbound stream was accepted")
		}
		accepted <- err
	}()
	stranger := mutual(other, "stranger")
	stranger.RootCAs = ca.Pool
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s, err := vgrpc.NewFrameTransport(vgrpc.WithFrameTLS(stranger)).Dial(ctx, ln.Entry(), ext.StreamRoute{AnchorID: 1, SessionID: 2}); err == nil {
		s.Close()
		t.Fatal("a refused client's Dial succeeded")
	}
	ln.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept = %v, want net.ErrClosed and no stream", err)
	}
}
