package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait that should end; a test that hits it has
// failed, it is never the expected path.
const testTimeout = 10 * time.Second

// testNode is a started node and, when asked for, the registry its
// metrics go to.
type testNode struct {
	*velo.Node
	reg *prometheus.Registry
	tr  ext.Transport
}

func startNode(t testing.TB, withMetrics bool) *testNode {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatalf("tcp.New: %v", err)
	}
	opts := []velo.Option{velo.WithTransport(tr)}
	var reg *prometheus.Registry
	if withMetrics {
		reg = prometheus.NewRegistry()
		vm, err := metrics.Register(reg)
		if err != nil {
			t.Fatalf("metrics.Register: %v", err)
		}
		opts = append(opts, velo.WithMetrics(vm))
	}
	n, err := velo.New(context.Background(), opts...)
	if err != nil {
		t.Fatalf("velo.New: %v", err)
	}
	t.Cleanup(func() { shutdownWithin(n, 5*time.Second) })
	return &testNode{Node: n, reg: reg, tr: tr}
}

// pair starts two nodes over TCP that know each other. Both directions are
// needed: the owner answers and notifies subscribers through its peer table.
func pair(t testing.TB, withMetrics bool) (a, b *testNode) {
	t.Helper()
	a, b = startNode(t, withMetrics), startNode(t, withMetrics)
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatalf("A.RegisterPeer: %v", err)
	}
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		t.Fatalf("B.RegisterPeer: %v", err)
	}
	return a, b
}

// frames sums velo_transport_frames_total over the series whose labels
// include every pair of want.
func (n *testNode) frames(t testing.TB, want map[string]string) float64 {
	t.Helper()
	fams, err := n.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != "velo_transport_frames_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			match := 0
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
					match++
				}
			}
			if match == len(want) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// outboundFrames counts every frame the node sent.
func (n *testNode) outboundFrames(t testing.TB) float64 {
	return n.frames(t, map[string]string{"direction": "outbound"})
}

// gauge reads an unlabelled gauge of the node's registry.
func (n *testNode) gauge(t testing.TB, name string) float64 {
	t.Helper()
	fams, err := n.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// eventually polls an observable condition (a counter) until it holds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after %v", what, testTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newEvent(t testing.TB, m *events.Manager) *events.Event {
	t.Helper()
	e, err := m.NewEvent()
	if err != nil {
		t.Fatalf("NewEvent: %v", err)
	}
	return e
}

// waitAsync starts a Wait and returns the channel its result arrives on.
func waitAsync(ctx context.Context, m *events.Manager, h events.Handle) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- m.Wait(ctx, h) }()
	return ch
}

func recv(t testing.TB, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(testTimeout):
		t.Fatalf("%s: no result after %v", what, testTimeout)
		return nil
	}
}

// wantPoisoned checks that err is a *PoisonedError for h with reason.
func wantPoisoned(t testing.TB, err error, h events.Handle, reason, what string) {
	t.Helper()
	var pe *events.PoisonedError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: got %v, want *PoisonedError", what, err)
	}
	if !errors.Is(err, events.ErrPoisoned) {
		t.Errorf("%s: errors.Is(err, ErrPoisoned) is false for %v", what, err)
	}
	if pe.Reason != reason {
		t.Errorf("%s: reason %q, want %q", what, pe.Reason, reason)
	}
	if pe.Handle != h {
		t.Errorf("%s: handle %s, want %s", what, pe.Handle, h)
	}
}

// stillPending checks that a wait on h does not end within a short time.
// Only a negative can be shown this way; the test that uses it proves the
// positive (that the event completes once triggered) right after.
func stillPending(t testing.TB, m *events.Manager, h events.Handle, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := m.Wait(ctx, h); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: Wait returned %v, want the event still pending", what, err)
	}
}

// shutdownWithin shuts n down, draining for at most d.
func shutdownWithin(n interface{ Shutdown(context.Context) error }, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Shutdown(ctx)
}
