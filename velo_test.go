package velo_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// TestMain checks that the facade's tests and Examples leave no goroutine
// behind once their nodes have shut down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func node(t *testing.T, opts ...velo.Option) *velo.Node {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), append([]velo.Option{velo.WithTransport(tr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdownWithin(n, 5*time.Second) })
	return n
}

func TestNewValidatesOptions(t *testing.T) {
	if _, err := velo.New(context.Background()); err == nil {
		t.Fatal("a node without a transport started")
	}
	for _, slots := range []int{-1, 1<<24 + 1} {
		tr, err := tcp.New()
		if err != nil {
			t.Fatal(err)
		}
		if n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithResponseSlots(slots)); err == nil {
			n.Shutdown(context.Background())
			t.Fatalf("%d response slots accepted", slots)
		}
	}
	// A failed start leaves no listener or goroutine behind (goleak checks).
	tr, err := tcp.New(tcp.WithListenAddr("256.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := velo.New(context.Background(), velo.WithTransport(tr)); err == nil {
		t.Fatal("a node with an unusable listen address started")
	}
}

// TestFacadeCalls: the facade's names are the messenger's, its typed calls
// work end to end, and a copy of a Node is the same node.
func TestFacadeCalls(t *testing.T) {
	vm, err := metrics.Register(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	server := node(t, velo.WithMetrics(vm))
	client := node(t)
	type in struct{ Name string }
	type out struct{ Greeting string }
	if err := server.Register(velo.TypedUnaryHandler("greet", func(c *velo.Context, req in) (out, error) {
		if req.Name == "" {
			return out{}, errors.New("no name")
		}
		return out{Greeting: "hello " + req.Name}, nil
	}, velo.WithOrdered())); err != nil {
		t.Fatal(err)
	}
	if err := client.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := velo.TypedUnary[out](ctx, client, server.InstanceID(), "greet", in{Name: "velo"})
	if err != nil || got.Greeting != "hello velo" {
		t.Fatalf("typed call: %+v, %v", got, err)
	}
	_, err = velo.TypedUnary[out](ctx, client, server.InstanceID(), "greet", in{})
	var re *velo.RemoteError
	if !errors.As(err, &re) || re.Handler != "greet" || re.Message != "no name" {
		t.Fatalf("remote error: %v", err)
	}
	if n := testutil.ToFloat64(vm.HandlerRequests.WithLabelValues("greet", "unary", "success")); n != 1 {
		t.Fatalf("WithMetrics: %v successful requests counted", n)
	}
	if n := testutil.ToFloat64(vm.HandlerRequests.WithLabelValues("greet", "unary", "error")); n != 1 {
		t.Fatalf("WithMetrics: %v failed requests counted", n)
	}
	cp := *client
	if cp.InstanceID() != client.InstanceID() || cp.Messenger() != client.Messenger() {
		t.Fatal("a copy of a Node is another node")
	}
	// The facade's errors are the messenger's.
	if velo.ErrShuttingDown != messenger.ErrShuttingDown || velo.ErrRequestTimeout != messenger.ErrRequestTimeout {
		t.Fatal("the facade's sentinel errors differ from the messenger's")
	}
}

// TestFacadeShutdown: Node.Shutdown drains and stops the messenger; later
// calls fail with ErrShuttingDown and Shutdown can be called again.
func TestFacadeShutdown(t *testing.T) {
	server := node(t)
	client := node(t)
	if err := client.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := server.Register(velo.SyncHandler("ok", func(c *velo.Context) error { return nil })); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Sync(ctx, server.InstanceID(), "ok", nil); err != nil {
		t.Fatal(err)
	}
	if err := client.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-client.Done():
	default:
		t.Fatal("Done is open after Shutdown returned")
	}
	if err := client.Sync(ctx, server.InstanceID(), "ok", nil); !errors.Is(err, velo.ErrShuttingDown) {
		t.Fatalf("call after shutdown: %v", err)
	}
	if err := client.Shutdown(context.Background()); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
}

// shutdownWithin shuts n down, draining for at most d.
func shutdownWithin(n interface{ Shutdown(context.Context) error }, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Shutdown(ctx)
}

// TestStreamsBetweenNodes: a node's Streams attaches to an anchor on
// another node; items arrive and Finalize ends the stream with io.EOF.
// A producer whose node shuts down mid stream ends its consumer's stream
// with ErrSenderDropped.
func TestStreamsBetweenNodes(t *testing.T) {
	a, b := node(t), node(t)
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	anchor, err := streaming.CreateAnchor[[]byte](b.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer anchor.Close()
	s, err := streaming.AttachAnchor[[]byte](ctx, a.Streams, anchor.Handle())
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"hello", "from", "a"} {
		if err := s.Send(ctx, []byte(tok)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for item, err := range anchor.All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(item))
	}
	if fmt.Sprint(got) != "[hello from a]" {
		t.Fatalf("got %q", got)
	}

	second, err := streaming.CreateAnchor[[]byte](b.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	s2, err := streaming.AttachAnchor[[]byte](ctx, a.Streams, second.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.Send(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if err := shutdownWithin(a, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Next(ctx); !errors.Is(err, streaming.ErrSenderDropped) {
		t.Fatalf("after the producer's node shut down: %v, want ErrSenderDropped", err)
	}
}

// TestNodeStreamMetrics: velo.WithMetrics reaches the node's streams: a
// stream between two nodes counts on the owner (attach, active anchors)
// and on the producer (attach round trip).
func TestNodeStreamMetrics(t *testing.T) {
	oreg, preg := prometheus.NewRegistry(), prometheus.NewRegistry()
	ovm, err := metrics.Register(oreg)
	if err != nil {
		t.Fatal(err)
	}
	pvm, err := metrics.Register(preg)
	if err != nil {
		t.Fatal(err)
	}
	owner, producer := node(t, velo.WithMetrics(ovm)), node(t, velo.WithMetrics(pvm))
	if err := producer.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	anchor, err := streaming.CreateAnchor[[]byte](owner.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer anchor.Close()
	s, err := streaming.AttachAnchor[[]byte](ctx, producer.Streams, anchor.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := testutil.GatherAndCompare(oreg, strings.NewReader(`
# HELP velo_streaming_active_anchors Anchors currently present in the streaming registry.
# TYPE velo_streaming_active_anchors gauge
velo_streaming_active_anchors 1
`), "velo_streaming_active_anchors"); err != nil {
		t.Fatal(err)
	}
	count := func(reg *prometheus.Registry, name, label, value string) uint64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var total uint64
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == label && l.GetValue() == value {
						total += uint64(m.GetCounter().GetValue()) + m.GetHistogram().GetSampleCount()
					}
				}
			}
		}
		return total
	}
	// The nodes negotiate the mux, so the owner counts the attach under it.
	if n := count(oreg, "velo_streaming_anchor_operations_total", "transport_scheme", "messenger-mux-v2"); n != 1 {
		t.Fatalf("owner: %d messenger-mux-v2 operations, want 1 (the attach)", n)
	}
	if n := count(preg, "velo_streaming_anchor_attach_rtt_seconds", "outcome", "success"); n != 1 {
		t.Fatalf("producer: %d attach round trips, want 1", n)
	}
}
