package velo_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testcert"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming"
	grpctr "github.com/velo-go/velo/transport/grpc"
	"github.com/velo-go/velo/transport/tcp"
)

// schemeNode is a node with the mux off, its own registry, and ft as its
// frame transport (nil: the default, over tr).
func schemeNode(t *testing.T, tr ext.Transport, ft ext.FrameTransport, vm *metrics.VeloMetrics) *velo.Node {
	t.Helper()
	opts := []velo.Option{velo.WithTransport(tr), velo.WithMetrics(vm),
		velo.WithMux(streaming.MuxConfig{Disabled: true}), velo.WithLogger(slog.New(slog.DiscardHandler))}
	if ft != nil {
		opts = append(opts, velo.WithFrameTransport(ft))
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
	return n
}

// streamOnce attaches from producer to an anchor of consumer, sends one
// item, finalizes, and reads it all.
func streamOnce(t *testing.T, consumer, producer *velo.Node) {
	t.Helper()
	if err := producer.RegisterPeer(consumer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	a, err := streaming.CreateAnchor[int](consumer.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := streaming.AttachAnchor[int](ctx, producer.Streams, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Next(ctx); err != nil || v != 1 {
		t.Fatalf("item = %d, %v", v, err)
	}
	if _, err := a.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	select {
	case <-s.Retired():
	case <-ctx.Done():
		t.Fatal("never retired")
	}
}

// The per-stream path's operations are labelled with its frame
// transport's key: the owner's attach, the producer's attach round trip
// and finalize, whatever the transport (built in or a plugin), and never
// "tcp-stream" or "unknown" for a stream that ran on another.
func TestStreamSchemeIsTheFrameTransportKey(t *testing.T) {
	ca := testcert.NewCA("scheme")
	plain := func() ext.Transport {
		tr, err := tcp.New()
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	mem := &memNet{lns: map[string]*memListener{}}
	for _, c := range []struct {
		key string
		tr  func() ext.Transport
		ft  func() ext.FrameTransport
	}{
		{"tcp-stream", plain, func() ext.FrameTransport { return nil }},
		{"tls-stream", func() ext.Transport {
			tr, err := tcp.New(tcp.WithTLS(testcert.Mutual(ca, ca.Issue("n"))))
			if err != nil {
				t.Fatal(err)
			}
			return tr
		}, func() ext.FrameTransport { return nil }},
		{"grpc-stream", plain, func() ext.FrameTransport { return grpctr.NewFrameTransport() }},
		{"mem-stream", plain, func() ext.FrameTransport { return memFrames{net: mem} }},
	} {
		t.Run(c.key, func(t *testing.T) {
			creg, cvm := registered(t)
			preg, pvm := registered(t)
			consumer := schemeNode(t, c.tr(), c.ft(), cvm)
			producer := schemeNode(t, c.tr(), c.ft(), pvm)
			streamOnce(t, consumer, producer)
			owner, prod := scrape(t, creg), scrape(t, preg)
			for _, want := range []struct {
				r    scrapeResult
				line string
			}{
				{owner, `velo_streaming_anchor_operations_total{operation="attach",outcome="success",transport_scheme="` + c.key + `"} 1`},
				{prod, `velo_streaming_anchor_attach_rtt_seconds_count{outcome="success",transport_scheme="` + c.key + `"} 1`},
				{prod, `velo_streaming_anchor_operations_total{operation="finalize",outcome="success",transport_scheme="` + c.key + `"} 1`},
				{prod, `velo_streaming_backpressure_total{transport_scheme="` + c.key + `"} 0`},
			} {
				if !containsLine(want.r.body, want.line) {
					t.Errorf("no %s in the scrape", want.line)
				}
			}
			for _, r := range []scrapeResult{owner, prod} {
				for _, bad := range []string{"tcp-stream", "unknown"} {
					if bad != c.key && opsLabelled(r.body, bad) {
						t.Errorf("an operation counted under %q on a %s stream", bad, c.key)
					}
				}
			}
		})
	}
}

func containsLine(body, line string) bool {
	for l := range strings.Lines(body) {
		if strings.TrimRight(l, "\n") == line {
			return true
		}
	}
	return false
}

// opsLabelled reports whether an operation or attach series carries the
// scheme (backpressure_total's pre-bound zeros are not operations).
func opsLabelled(body, scheme string) bool {
	for l := range strings.Lines(body) {
		if (strings.HasPrefix(l, "velo_streaming_anchor_operation") || strings.HasPrefix(l, "velo_streaming_anchor_attach")) &&
			strings.Contains(l, `transport_scheme="`+scheme+`"`) {
			return true
		}
	}
	return false
}
