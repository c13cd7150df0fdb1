package velo_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testcert"
	"github.com/velo-go/velo/streaming"
	grpctr "github.com/velo-go/velo/transport/grpc"
	"github.com/velo-go/velo/transport/tcp"
)

// startStreamNode starts a node on trs with the mux off, so that its
// streams take the per-stream path, and a "generate" handler that streams
// three strings back to the anchor it is given.
func startStreamNode(t *testing.T, trs ...ext.Transport) *velo.Node {
	t.Helper()
	opts := []velo.Option{velo.WithMux(streaming.MuxConfig{Disabled: true}), velo.WithLogger(slog.New(slog.DiscardHandler))}
	for _, tr := range trs {
		opts = append(opts, velo.WithTransport(tr))
	}
	n, err := velo.New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	err = n.Register(velo.TypedUnaryHandler("generate", func(c *velo.Context, h streaming.AnchorHandle) (int, error) {
		s, err := streaming.AttachAnchor[string](c.Context(), n.Streams, h)
		if err != nil {
			return 0, err
		}
		for _, tok := range []string{"a", "b", "c"} {
			if err := s.Send(c.Context(), tok); err != nil {
				return 0, err
			}
		}
		return 3, s.Finalize()
	}))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func tlsTransport(t *testing.T, ca *testcert.CA, cn string) *tcp.Transport {
	t.Helper()
	tr, err := tcp.New(tcp.WithTLS(testcert.Mutual(ca, ca.Issue(cn))))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// stream asks engine to stream into an anchor of frontend and returns what
// arrived, or the first error.
func stream(t *testing.T, frontend, engine *velo.Node) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	anchor, err := streaming.CreateAnchor[string](frontend.Streams)
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan error, 1)
	go func() {
		_, err := velo.TypedUnary[int](ctx, frontend, engine.InstanceID(), "generate", anchor.Handle())
		called <- err
	}()
	var got strings.Builder
	for tok, err := range anchor.All(ctx) {
		if err != nil {
			return got.String(), errors.Join(err, <-called)
		}
		got.WriteString(tok)
	}
	return got.String(), <-called
}

// With a TCP transport built WithTLS, the per-stream path runs over TLS
// with the same config: the listener is advertised under "tls-stream"
// (never "tcp-stream"), it completes a TLS handshake for a client the CA
// signed, and a stream off the mux arrives whole through it.
func TestStreamsOffTheMuxRunOverTLS(t *testing.T) {
	ca := testcert.NewCA("streams")
	frontend := startStreamNode(t, tlsTransport(t, ca, "frontend"))
	engine := startStreamNode(t, tlsTransport(t, ca, "engine"))
	info := frontend.PeerInfo()
	if _, ok := info.Address["tcp-stream"]; ok {
		t.Fatalf("a TLS node advertises a plain per-stream listener: %v", info.Address)
	}
	ep, ok := info.Address["tls-stream"]
	if !ok {
		t.Fatalf("no tls-stream entry in %v", info.Address)
	}
	addr, err := tcp.DialAddr(ep)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", addr, testcert.Mutual(ca, ca.Issue("probe")))
	if err != nil {
		t.Fatalf("a TLS handshake with the per-stream listener: %v", err)
	}
	c.Close()
	if err := frontend.RegisterPeer(engine.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := engine.RegisterPeer(info); err != nil {
		t.Fatal(err)
	}
	got, err := stream(t, frontend, engine)
	if err != nil || got != "abc" {
		t.Fatalf("a stream over the TLS per-stream path: %q, %v; want abc", got, err)
	}
}

// A producer that speaks the per-stream path only in the clear cannot
// reach an anchor whose node serves it over TLS: the attach fails at once
// with an error that names the missing listener, and nothing is sent in
// the clear. The owner runs plain TCP too, so the two share a messenger
// transport.
func TestAPlainProducerDoesNotStreamToATLSOwner(t *testing.T) {
	ca := testcert.NewCA("streams")
	plain, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	owner := startStreamNode(t, tlsTransport(t, ca, "owner"), plain)
	producerTr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	producer := startStreamNode(t, producerTr)
	if err := owner.RegisterPeer(producer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := producer.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	anchor, err := streaming.CreateAnchor[string](owner.Streams)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = velo.TypedUnary[int](ctx, owner, producer.InstanceID(), "generate", anchor.Handle())
	if err == nil || !strings.Contains(err.Error(), "per-stream listener") {
		t.Fatalf("a plain producer streaming to a TLS owner: %v, want a refused attach that names the listener", err)
	}
}

// A node whose messenger transport is gRPC built WithTLS runs its
// per-stream path over TCP with the same TLS, as one on TCP WithTLS does:
// "tls-stream", never "tcp-stream", and a stream off the mux arrives.
func TestStreamsOffTheMuxRunOverTLSWithGRPC(t *testing.T) {
	ca := testcert.NewCA("grpc streams")
	grpcTLS := func(cn string) ext.Transport {
		tr, err := grpctr.New(grpctr.WithTLS(testcert.Mutual(ca, ca.Issue(cn))))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	frontend := startStreamNode(t, grpcTLS("frontend"))
	engine := startStreamNode(t, grpcTLS("engine"))
	info := frontend.PeerInfo()
	if _, ok := info.Address["tcp-stream"]; ok {
		t.Fatalf("a gRPC TLS node advertises a plain per-stream listener: %v", info.Address)
	}
	if _, ok := info.Address["tls-stream"]; !ok {
		t.Fatalf("no tls-stream entry in %v", info.Address)
	}
	if err := frontend.RegisterPeer(engine.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := engine.RegisterPeer(info); err != nil {
		t.Fatal(err)
	}
	got, err := stream(t, frontend, engine)
	if err != nil || got != "abc" {
		t.Fatalf("a stream over the TLS per-stream path: %q, %v; want abc", got, err)
	}
}
