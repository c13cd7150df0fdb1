package tcp_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/internal/testcert"
	"github.com/velo-go/velo/transport/tcp"
	"github.com/velo-go/velo/transport/transporttest"
)

// pki is one certificate authority and the configs of nodes it signed.
type pki struct{ ca *testcert.CA }

func newPKI(name string) pki { return pki{testcert.NewCA(name)} }

// mutual is the mutual-TLS config of a node called cn.
func (p pki) mutual(cn string) *tls.Config { return testcert.Mutual(p.ca, p.ca.Issue(cn)) }

func tlsFactory(p pki) transporttest.Factory {
	f := factoryWith(tcp.WithTLS(p.mutual("node")))
	// A raw socket of a TLS transport is a TLS connection with a valid
	// client certificate: the bytes fed to it must reach the frame reader.
	f.DialRaw = func(ep []byte) (net.Conn, error) {
		addr, err := tcp.DialAddr(ep)
		if err != nil {
			return nil, err
		}
		cfg := p.mutual("raw")
		cfg.ServerName = "127.0.0.1"
		return tls.Dial("tcp", addr, cfg)
	}
	return f
}

// TestConformanceOverMutualTLS runs the whole conformance suite over TLS
// with client certificates on every connection.
func TestConformanceOverMutualTLS(t *testing.T) {
	transporttest.Run(t, tlsFactory(newPKI("conformance CA")))
}

func TestTLSKeyAndPriority(t *testing.T) {
	p := newPKI("ca")
	tr, err := tcp.New(tcp.WithTLS(p.mutual("a")))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Key() != tcp.TLSKey || tr.Key() != "tls" || tr.Priority() != tcp.TLSPriority || tr.Priority() <= 100 {
		t.Fatalf("key %q priority %d, want %q above plain TCP's 100", tr.Key(), tr.Priority(), tcp.TLSKey)
	}
	if tr, err = tcp.New(tcp.WithPriority(7), tcp.WithTLS(p.mutual("a"))); err != nil || tr.Priority() != 7 {
		t.Fatalf("WithPriority(7) over TLS: %v, %v", tr, err)
	}
	old := p.mutual("a")
	old.MinVersion = tls.VersionTLS11
	if _, err := tcp.New(tcp.WithTLS(old)); err == nil {
		t.Fatal("a config that allows TLS 1.1 was taken")
	}
	if _, err := tcp.New(tcp.WithTLS(&tls.Config{})); err == nil {
		t.Fatal("a config with no certificate to serve was taken")
	}
	if _, err := tcp.New(tcp.WithPeerAuthorizer(func(tls.ConnectionState) error { return nil })); err == nil {
		t.Fatal("WithPeerAuthorizer without WithTLS was taken")
	}
}

// tlsNode is a velo node on one TCP transport, with a handler "who" that
// counts its runs and answers with the caller's certificate name.
type tlsNode struct {
	*velo.Node
	tr   *tcp.Transport
	runs atomic.Int64
}

func startVelo(t testing.TB, opts ...tcp.Option) *tlsNode {
	t.Helper()
	return startVeloWith(t, nil, opts...)
}

// startVeloWith is startVelo with more transports for the node.
func startVeloWith(t testing.TB, more []ext.Transport, opts ...tcp.Option) *tlsNode {
	t.Helper()
	tr, err := tcp.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	vopts := []velo.Option{velo.WithTransport(tr), velo.WithLogger(slog.New(slog.DiscardHandler))}
	for _, m := range more {
		vopts = append(vopts, velo.WithTransport(m))
	}
	n, err := velo.New(context.Background(), vopts...)
	if err != nil {
		t.Fatal(err)
	}
	node := &tlsNode{Node: n, tr: tr}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	err = n.Register(velo.UnaryHandler("who", func(c *velo.Context) ([]byte, error) {
		node.runs.Add(1)
		st := c.PeerTLS()
		if st == nil {
			return []byte("plain"), nil
		}
		if len(st.PeerCertificates) == 0 {
			return []byte("no certificate"), nil
		}
		return []byte(st.PeerCertificates[0].Subject.CommonName), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func (n *tlsNode) call(t *testing.T, to *tlsNode) (string, error) {
	t.Helper()
	if err := n.RegisterPeer(to.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := n.Unary(ctx, to.InstanceID(), "who", nil)
	return string(out), err
}

// wantUntrusted checks that a call failed on trust, as a lost peer, and
// says why.
func wantUntrusted(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, velo.ErrPeerUntrusted) || !errors.Is(err, velo.ErrPeerUnreachable) {
		t.Fatalf("%s: %v, want ErrPeerUntrusted and ErrPeerUnreachable", what, err)
	}
	if !strings.Contains(err.Error(), "tls") && !strings.Contains(err.Error(), "x509") {
		t.Errorf("%s: %v does not say what TLS refused", what, err)
	}
	if c := velo.ErrorCode(err); c != velo.Unauthenticated {
		t.Errorf("%s: code %v, want Unauthenticated", what, c)
	}
	t.Logf("%s: %v", what, err)
}

// TestPeerTLSReadsTheCallersCertificate: a handler reads the caller's
// certificate name from its context; over plain TCP it finds none.
func TestPeerTLSReadsTheCallersCertificate(t *testing.T) {
	p := newPKI("ca")
	srv := startVelo(t, tcp.WithTLS(p.mutual("server")))
	alice := startVelo(t, tcp.WithTLS(p.mutual("alice")))
	if got, err := alice.call(t, srv); err != nil || got != "alice" {
		t.Fatalf("call over TLS: %q, %v; want the caller's name, alice", got, err)
	}
	plainSrv, plainCli := startVelo(t), startVelo(t)
	if got, err := plainCli.call(t, plainSrv); err != nil || got != "plain" {
		t.Fatalf("call over plain TCP: %q, %v; want no TLS state", got, err)
	}
}

// TestTLSClientWithoutValidCertificateIsRefused: a dialer with no client
// certificate, or one another CA signed, is refused at the handshake: no
// handler runs, its calls fail on trust, and the node goes on serving a
// valid peer.
func TestTLSClientWithoutValidCertificateIsRefused(t *testing.T) {
	p, other := newPKI("ca"), newPKI("another CA")
	srv := startVelo(t, tcp.WithTLS(p.mutual("server")))

	// Trusts the server; its own certificate a stranger signed, sent
	// though the server's request names other CAs (tls alone would send
	// none then).
	forgery := other.ca.Issue("forger")
	forged := &tls.Config{RootCAs: p.ca.Pool, Certificates: []tls.Certificate{forgery}}
	forged.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &forgery, nil }
	forger := startVelo(t, tcp.WithTLS(forged))
	_, err := forger.call(t, srv)
	wantUntrusted(t, "a call with a certificate of another CA", err)

	// A client that sends no certificate (it has one to serve with).
	noCert := &tls.Config{RootCAs: p.ca.Pool, Certificates: []tls.Certificate{other.ca.Issue("forger")}}
	noCert.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &tls.Certificate{}, nil
	}
	anon := startVelo(t, tcp.WithTLS(noCert))
	_, err = anon.call(t, srv)
	wantUntrusted(t, "a call with no client certificate", err)

	if n := srv.runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for refused callers", n)
	}
	// The listener counts a failure after it sent its alert, so perhaps
	// after the dialer read it.
	for deadline := time.Now().Add(5 * time.Second); srv.tr.Stats().HandshakeFailures < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("handshake failures counted %d, want at least 2", srv.tr.Stats().HandshakeFailures)
		}
		time.Sleep(time.Millisecond)
	}
	alice := startVelo(t, tcp.WithTLS(p.mutual("alice")))
	if got, err := alice.call(t, srv); err != nil || got != "alice" {
		t.Fatalf("a valid peer after the refusals: %q, %v", got, err)
	}
	if n := srv.runs.Load(); n != 1 {
		t.Fatalf("handler runs %d, want 1 (alice's)", n)
	}
}

// TestTLSStalledHandshakeCostsOnlyItsConnection: a client that connects
// and never says anything holds neither the accept loop nor a valid peer,
// and its connection is cut at the frame timeout. So is one that speaks
// plain frames to a TLS listener.
func TestTLSStalledHandshakeCostsOnlyItsConnection(t *testing.T) {
	p := newPKI("ca")
	srv := startNode(t, nil, tcp.WithTLS(p.mutual("server")), tcp.WithFrameTimeout(300*time.Millisecond))
	addr, err := tcp.DialAddr(srv.ep)
	if err != nil {
		t.Fatal(err)
	}
	var silent []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("p")}))

	// A valid peer is served while they stall.
	cli := startNode(t, nil, tcp.WithTLS(p.mutual("client")))
	if err := cli.tr.Register(ext.PeerInfo{InstanceID: srv.id, Address: ext.WorkerAddress{tcp.TLSKey: srv.ep}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.tr.Send(srv.id, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	popMessages(t, srv, 1)

	// The silent ones are closed at the frame timeout.
	for i, c := range silent {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		if _, err := c.Read(b[:]); err == nil || isTimeout(err) {
			t.Fatalf("silent connection %d: %v, want it closed", i, err)
		}
	}
	// The plain dialer's failure is counted without anything it could wait on.
	for deadline := time.Now().Add(5 * time.Second); srv.tr.(*tcp.Transport).Stats().HandshakeFailures < 5 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if s := srv.tr.(*tcp.Transport).Stats(); s.HandshakeFailures != 5 {
		t.Fatalf("handshake failures %d, want 5 (4 silent, 1 plain)", s.HandshakeFailures)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestTLSWrongServerCertificateFailsTheDial: a listener whose certificate
// the dialer does not trust, or that names another host, fails the dial,
// and a call to it, on trust.
func TestTLSWrongServerCertificateFailsTheDial(t *testing.T) {
	p, other := newPKI("ca"), newPKI("another CA")
	cli := startVelo(t, tcp.WithTLS(p.mutual("client")))

	stranger := testcert.Mutual(p.ca, other.ca.Issue("server")) // trusts us; we do not trust it
	srv := startVelo(t, tcp.WithTLS(stranger))
	_, err := cli.call(t, srv)
	wantUntrusted(t, "a call to a server another CA signed", err)
	if !strings.Contains(err.Error(), "x509") {
		t.Errorf("the error does not keep the x509 reason: %v", err)
	}

	elsewhere := testcert.Mutual(p.ca, p.ca.Issue("server", "192.0.2.1", "example.com"))
	misnamed := startVelo(t, tcp.WithTLS(elsewhere))
	_, err = cli.call(t, misnamed)
	wantUntrusted(t, "a call to a server whose certificate names another host", err)

	if srv.runs.Load()+misnamed.runs.Load() != 0 {
		t.Fatal("a handler ran on an untrusted server")
	}

	// The transport's own health check says the same.
	tr, err := tcp.New(tcp.WithTLS(p.mutual("client")))
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	if err := tr.Register(srv.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := tr.CheckHealth(context.Background(), srv.InstanceID()); !errors.Is(err, ext.ErrPeerUntrusted) {
		t.Fatalf("health check of an untrusted server: %v, want ErrPeerUntrusted", err)
	}
}

// TestTLSPeerAuthorizerRefusesBySubject: a listener's authorizer refuses
// mallory by his certificate's name though the CA signed it, and a
// dialer's refuses a server the same way; the config's own
// VerifyConnection still runs.
func TestTLSPeerAuthorizerRefusesBySubject(t *testing.T) {
	p := newPKI("ca")
	noMallory := func(st tls.ConnectionState) error {
		if len(st.PeerCertificates) > 0 && st.PeerCertificates[0].Subject.CommonName == "mallory" {
			return fmt.Errorf("%s is not welcome", st.PeerCertificates[0].Subject.CommonName)
		}
		return nil
	}
	cfg := p.mutual("server")
	var verified atomic.Int64
	cfg.VerifyConnection = func(tls.ConnectionState) error {
		verified.Add(1)
		return nil
	}
	srv := startVelo(t, tcp.WithTLS(cfg), tcp.WithPeerAuthorizer(noMallory))

	mallory := startVelo(t, tcp.WithTLS(p.mutual("mallory")))
	_, err := mallory.call(t, srv)
	wantUntrusted(t, "mallory's call", err)

	alice := startVelo(t, tcp.WithTLS(p.mutual("alice")))
	if got, err := alice.call(t, srv); err != nil || got != "alice" {
		t.Fatalf("alice's call: %q, %v", got, err)
	}
	if n := srv.runs.Load(); n != 1 {
		t.Fatalf("handler runs %d, want 1 (alice's)", n)
	}
	if verified.Load() == 0 {
		t.Fatal("the config's own VerifyConnection did not run")
	}

	// On the dialing side: alice's authorizer refuses a server named mallory.
	evil := startVelo(t, tcp.WithTLS(p.mutual("mallory")))
	careful := startVelo(t, tcp.WithTLS(p.mutual("carol")), tcp.WithPeerAuthorizer(noMallory))
	_, err = careful.call(t, evil)
	wantUntrusted(t, "a call to a server named mallory", err)
	if !strings.Contains(err.Error(), "not welcome") {
		t.Errorf("the error does not keep the authorizer's reason: %v", err)
	}
	if evil.runs.Load() != 0 {
		t.Fatal("the refused server's handler ran")
	}
}

// TestKilledTLSPeerFailsCallsInFlight: as over plain TCP, calls waiting on
// a peer whose connections die fail within 100 ms with
// ErrPeerUnreachable; and a peer that shuts down in order says goodbye
// over TLS, so its loss is a shutdown.
func TestKilledTLSPeerFailsCallsInFlight(t *testing.T) {
	p := newPKI("ca")
	srv := startVelo(t, tcp.WithTLS(p.mutual("server")))
	cli := startVelo(t, tcp.WithTLS(p.mutual("client")))
	block := make(chan struct{})
	defer close(block)
	var started atomic.Int64
	if err := srv.Register(velo.UnaryHandler("block", func(*velo.Context) ([]byte, error) {
		started.Add(1)
		<-block
		return nil, nil
	})); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.call(t, srv); err != nil {
		t.Fatal(err)
	}
	const inFlight = 16
	type result struct {
		err error
		at  time.Time
	}
	results := make(chan result, inFlight)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range inFlight {
		go func() {
			_, err := cli.Unary(ctx, srv.InstanceID(), "block", nil)
			results <- result{err, time.Now()}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); started.Load() < inFlight; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d calls reached the handler", started.Load(), inFlight)
		}
		time.Sleep(time.Millisecond)
	}
	killed := time.Now()
	tcp.Kill(srv.tr)
	for i := range inFlight {
		r := <-results
		if !errors.Is(r.err, velo.ErrPeerUnreachable) || errors.Is(r.err, velo.ErrPeerUntrusted) {
			t.Errorf("call %d: %v, want ErrPeerUnreachable (and not a trust failure)", i, r.err)
		}
		if d := r.at.Sub(killed); d > 100*time.Millisecond {
			t.Errorf("call %d failed %v after the kill, want within 100 ms", i, d)
		}
	}
}

// TestTLSGoodbyeIsAShutdown: a TLS listener that shuts down in order says
// goodbye, and the dialer reports the end as the peer's shutdown, as over
// plain TCP.
func TestTLSGoodbyeIsAShutdown(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprint("tls=", useTLS), func(t *testing.T) {
			p := newPKI("ca")
			var srvOpts, cliOpts []tcp.Option
			if useTLS {
				srvOpts = append(srvOpts, tcp.WithTLS(p.mutual("server")))
				cliOpts = append(cliOpts, tcp.WithTLS(p.mutual("client")))
			}
			srv := startNode(t, nil, srvOpts...)
			cli := startNode(t, nil, cliOpts...)
			lost := make(chan error, 4)
			cli.a.SetPeerLostHandler(func(_ ext.InstanceID, err error) { lost <- err })
			if err := cli.tr.Register(ext.PeerInfo{InstanceID: srv.id, Address: ext.WorkerAddress{srv.tr.Key(): srv.ep}}); err != nil {
				t.Fatal(err)
			}
			if _, err := cli.tr.Send(srv.id, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			popMessages(t, srv, 1)
			srv.tr.Shutdown()
			select {
			case err := <-lost:
				if !errors.Is(err, ext.ErrPeerShutdown) || !errors.Is(err, ext.ErrPeerUnreachable) {
					t.Fatalf("loss after the goodbye: %v, want ErrPeerShutdown", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no loss reported after the peer shut down")
			}
		})
	}
}

// TestPlainAndTLSSideBySide: a node may run a plain and a TLS transport
// at once; between two such nodes calls go over TLS, which has the higher
// priority, and a node with only plain TCP still reaches the plain one.
func TestPlainAndTLSSideBySide(t *testing.T) {
	p := newPKI("ca")
	both := func(cn string) *tlsNode {
		plain, err := tcp.New()
		if err != nil {
			t.Fatal(err)
		}
		return startVeloWith(t, []ext.Transport{plain}, tcp.WithTLS(p.mutual(cn)))
	}
	srv, cli := both("server"), both("client")
	if _, ok := srv.PeerInfo().Address[tcp.Key]; !ok {
		t.Fatalf("the address %v has no plain entry", srv.PeerInfo().Address)
	}
	if got, err := cli.call(t, srv); err != nil || got != "client" {
		t.Fatalf("call between nodes with both transports: %q, %v; want it over TLS", got, err)
	}
	plainOnly := startVelo(t)
	if got, err := plainOnly.call(t, srv); err != nil || got != "plain" {
		t.Fatalf("call from a plain-only node: %q, %v; want it over plain TCP", got, err)
	}
}

// BenchmarkUnaryRoundTrip compares one unary call at a time over plain TCP
// and over mutual TLS, with small and 64 KiB payloads echoed back.
func BenchmarkUnaryRoundTrip(b *testing.B) {
	p := newPKI("ca")
	for _, arm := range []struct {
		name string
		opts func(cn string) []tcp.Option
	}{
		{"tcp", func(string) []tcp.Option { return nil }},
		{"tls", func(cn string) []tcp.Option { return []tcp.Option{tcp.WithTLS(p.mutual(cn))} }},
	} {
		for _, size := range []int{64, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%d", arm.name, size), func(b *testing.B) {
				srv, cli := startVelo(b, arm.opts("server")...), startVelo(b, arm.opts("client")...)
				if err := srv.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
					return c.Payload, nil
				}, velo.WithInline())); err != nil {
					b.Fatal(err)
				}
				if err := cli.RegisterPeer(srv.PeerInfo()); err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				payload := make([]byte, size)
				if _, err := cli.Unary(ctx, srv.InstanceID(), "echo", payload); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(2 * size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := cli.Unary(ctx, srv.InstanceID(), "echo", payload); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestServerOnlyTLS: without ClientAuth the listener asks for no client
// certificate; calls work, and the handler sees a TLS connection whose
// caller showed none.
func TestServerOnlyTLS(t *testing.T) {
	p := newPKI("ca")
	cfg := func(cn string) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{p.ca.Issue(cn)}, RootCAs: p.ca.Pool}
	}
	srv, cli := startVelo(t, tcp.WithTLS(cfg("server"))), startVelo(t, tcp.WithTLS(cfg("client")))
	if got, err := cli.call(t, srv); err != nil || got != "no certificate" {
		t.Fatalf("call over server-only TLS: %q, %v; want a TLS caller without a certificate", got, err)
	}
}
