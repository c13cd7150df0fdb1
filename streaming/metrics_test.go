package streaming

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/metrics"
)

func newMetrics(t *testing.T) (*prometheus.Registry, *metrics.VeloMetrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	vm, err := metrics.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, vm
}

// metricValue reads one series of reg: labels written "k=v,k=v" in
// Prometheus' (sorted) order, "" for none. A histogram gives its count. A
// series that is not there reads 0: the operation families bind a label
// set on its first record (metrics.StreamingMetrics).
func metricValue(t *testing.T, reg *prometheus.Registry, name, labels string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			if strings.Join(kv, ",") != labels {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func op(name, outcome, scheme string) string {
	return "operation=" + name + ",outcome=" + outcome + ",transport_scheme=" + scheme
}

func wantValue(t *testing.T, reg *prometheus.Registry, name, labels string, want float64) {
	t.Helper()
	if got := metricValue(t, reg, name, labels); got != want {
		t.Fatalf("%s{%s} = %v, want %v", name, labels, got, want)
	}
}

const (
	opsTotal   = "velo_streaming_anchor_operations_total"
	opDuration = "velo_streaming_anchor_operation_duration_seconds"
)

// TestMetricsLifecycle: create, attach, finalize, detach, cancel and renew
// each move their series on a same-worker Manager, errors under
// outcome="error", and the created counter splits by kind.
func TestMetricsLifecycle(t *testing.T) {
	reg, vm := newMetrics(t)
	m := newTestManager(t, WithMetrics(vm))
	ctx := context.Background()

	a, s := newPair[[]byte](t, m)
	if err := s.Send(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	mustNext(t, a)
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := s.Finalize(); !errors.Is(err, ErrSenderClosed) {
		t.Fatalf("second Finalize = %v", err)
	}
	if _, err := AttachAnchor[[]byte](ctx, m, a.Handle()); !errors.Is(err, ErrAlreadyAttached) {
		t.Fatalf("second attach = %v", err)
	}
	if _, err := CreateAnchor[[]byte](m, WithCapacity(0)); err == nil {
		t.Fatal("capacity 0 accepted")
	}

	mp, err := CreateMPSCAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	ms, err := AttachMPSCAnchor[[]byte](ctx, m, mp.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Detach(); err != nil {
		t.Fatal(err)
	}

	b, _ := newPair[[]byte](t, m)
	b.Controller().Cancel()
	b.Controller().Cancel() // counted once
	if err := m.RenewReservations(b.Handle(), mp.Handle()); err != nil {
		t.Fatal(err)
	}

	wantValue(t, reg, "velo_streaming_anchors_created_total", "kind=spsc", 2)
	wantValue(t, reg, "velo_streaming_anchors_created_total", "kind=mpsc", 1)
	for _, c := range []struct {
		op, outcome string
		want        float64
	}{
		{"create", "success", 3}, {"create", "error", 1},
		{"attach", "success", 3}, {"attach", "error", 1},
		{"finalize", "success", 1}, {"finalize", "error", 1},
		{"detach", "success", 1}, {"detach", "error", 0},
		{"cancel", "success", 1},
		{"renew", "success", 2},
	} {
		wantValue(t, reg, opsTotal, op(c.op, c.outcome, "local"), c.want)
	}
	// Durations come with the operations that take time.
	wantValue(t, reg, opDuration, op("attach", "success", "local"), 3)
	wantValue(t, reg, opDuration, op("create", "error", "local"), 1)
}

// TestMetricsActiveAnchorsAtScrape: the gauge is what the registry holds
// when scraped, summed over the Managers that report into it, and a closed
// Manager leaves it.
func TestMetricsActiveAnchorsAtScrape(t *testing.T) {
	reg, vm := newMetrics(t)
	m1 := newTestManager(t, WithMetrics(vm))
	m2 := NewManager(testOwner+1, WithMetrics(vm))
	defer m2.Close()
	const name = "velo_streaming_active_anchors"
	wantValue(t, reg, name, "", 0)
	a1, _ := newPair[[]byte](t, m1)
	newPair[[]byte](t, m1)
	newPair[[]byte](t, m2)
	wantValue(t, reg, name, "", 3)
	a1.Close()
	wantValue(t, reg, name, "", 2)
	m2.Close()
	wantValue(t, reg, name, "", 1)
}

// TestMetricsProducerBackpressure: a Send that finds the inlet full counts
// once, however long it waits; one that finds room does not.
func TestMetricsProducerBackpressure(t *testing.T) {
	reg, vm := newMetrics(t)
	m := newTestManager(t, WithMetrics(vm))
	a, s := newPair[[]byte](t, m, WithCapacity(1))
	ctx := context.Background()
	if err := s.Send(ctx, []byte("1")); err != nil {
		t.Fatal(err)
	}
	wantValue(t, reg, "velo_streaming_producer_send_backpressure_total", "", 0)
	done := make(chan error, 1)
	go func() { done <- s.Send(ctx, []byte("2")) }()
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(t, reg, "velo_streaming_producer_send_backpressure_total", "") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a Send into a full inlet was never counted")
		}
		time.Sleep(time.Millisecond)
	}
	mustNext(t, a)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustNext(t, a)
	wantValue(t, reg, "velo_streaming_producer_send_backpressure_total", "", 1)
	wantValue(t, reg, "velo_streaming_backpressure_total", "transport_scheme=local", 1)

	// MPSC sends wait on the same inlet and count the same way.
	mp, err := CreateMPSCAnchor[[]byte](m, WithCapacity(1))
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	ms, err := AttachMPSCAnchor[[]byte](ctx, m, mp.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	if err := ms.Send(ctx, []byte("1")); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := ms.Send(tctx, []byte("2")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send into a full MPSC inlet = %v", err)
	}
	wantValue(t, reg, "velo_streaming_producer_send_backpressure_total", "", 2)
}

// TestMetricsUnattachedTimeout: an anchor that no producer attaches to
// within its timeout counts once.
func TestMetricsUnattachedTimeout(t *testing.T) {
	reg, vm := newMetrics(t)
	m := newTestManager(t, WithMetrics(vm))
	a, err := CreateAnchor[[]byte](m, WithUnattachedTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrUnattachedTimeout) {
		t.Fatalf("Next = %v, want ErrUnattachedTimeout", err)
	}
	wantValue(t, reg, "velo_streaming_unattached_timeouts_total", "", 1)
	// The expiry ended the stream: a later Close is not a cancel.
	a.Close()
	wantValue(t, reg, opsTotal, op("cancel", "success", "local"), 0)
}

// TestMetricsRemoteAttachAndWatchdog: a remote attach counts its round
// trip on the producer's node and the attach handler on the owner's, and
// a watchdog firing (the producer's heartbeats paused) counts on the
// owner's node.
func TestMetricsRemoteAttachAndWatchdog(t *testing.T) {
	preg, pvm := newMetrics(t)
	creg, cvm := newMetrics(t)
	producer := newRemoteNode(t, WithMetrics(pvm))
	consumer := newRemoteNode(t, WithMetrics(cvm), WithHeartbeatInterval(testWindow),
		WithStreamLogger(slog.New(slog.DiscardHandler)))
	if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := attachRemoteT[[]byte](t, producer, a.Handle())

	wantValue(t, preg, "velo_streaming_anchor_attach_rtt_seconds", "outcome=success,transport_scheme=tcp-stream", 1)
	wantValue(t, creg, opsTotal, op("attach", "success", "tcp-stream"), 1)
	wantValue(t, creg, opDuration, op("attach", "success", "tcp-stream"), 1)
	// The sender's own attach is its round trip only.
	wantValue(t, preg, opsTotal, op("attach", "success", "tcp-stream"), 0)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle()); !errors.Is(err, ErrAlreadyAttached) {
		t.Fatalf("second remote attach = %v", err)
	}
	wantValue(t, preg, "velo_streaming_anchor_attach_rtt_seconds", "outcome=error,transport_scheme=unknown", 1)
	wantValue(t, creg, opsTotal, op("attach", "error", "tcp-stream"), 1)

	producer.sm.remote.tcp.PauseHeartbeats(true)
	if err := s.Send(context.Background(), []byte("last")); err != nil {
		t.Fatal(err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("Next = %v, want ErrSenderDropped", err)
	}
	wantValue(t, creg, "velo_streaming_heartbeat_watchdog_firings_total", "", 1)
	wantValue(t, preg, "velo_streaming_heartbeat_watchdog_firings_total", "", 0)
}

// TestMetricsRecordAllocations: with metrics installed, a byte record on
// an attached same-worker stream costs what it costs without them (see
// TestByteRecordAllocations): every series is bound before the first
// record.
func TestMetricsRecordAllocations(t *testing.T) {
	_, vm := newMetrics(t)
	for _, c := range []struct {
		name string
		m    *Manager
	}{
		{"without", newTestManager(t)},
		{"with", newTestManager(t, WithMetrics(vm))},
		{"nil", newTestManager(t, WithMetrics(nil))},
	} {
		a, s := newPair[[]byte](t, c.m)
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			if err := s.SendBytes(ctx, benchPayload); err != nil {
				t.Fatal(err)
			}
			if _, err := a.NextBytes(ctx); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 1 {
			t.Fatalf("%s metrics: %v allocations per record, want at most 1", c.name, allocs)
		}
	}
}

// metricNodes is a producer and a consumer node, each recording into its
// own registry, with the producer's heartbeats paused so that the egress
// counters see only the frames a test sends.
func metricNodes(t *testing.T, consumerOpts ...ManagerOption) (preg, creg *prometheus.Registry, producer, consumer *remoteNode) {
	t.Helper()
	preg, pvm := newMetrics(t)
	creg, cvm := newMetrics(t)
	producer = newRemoteNode(t, WithMetrics(pvm))
	consumer = newRemoteNode(t, append(consumerOpts, WithMetrics(cvm))...)
	if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	producer.sm.remote.tcp.PauseHeartbeats(true)
	return preg, creg, producer, consumer
}

// waitRetired waits for the sender's output to retire as Sent: the pump
// counts a write before it retires the stream, so the egress counters are
// final once this returns.
func waitRetired(t *testing.T, s *Sender[[]byte]) {
	t.Helper()
	select {
	case <-s.Retired():
		if out := s.Outcome(); out != RetireSent {
			t.Fatalf("retired %v, want %v", out, RetireSent)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream never retired")
	}
}

// TestMetricsEgressPumpCounts: N items sent one at a time, each read
// before the next is sent, then Finalize. The producer's node counts N+1
// frames written (the terminal is a frame on the wire too) in at most N+1
// flushes; the consumer's node, which writes nothing, counts none.
func TestMetricsEgressPumpCounts(t *testing.T) {
	preg, creg, producer, consumer := metricNodes(t)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	const n = 20
	for i := range n {
		if err := s.SendBytes(context.Background(), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := nextItemWithin(t, a, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	waitRetired(t, s)
	wantValue(t, preg, "velo_streaming_frames_written_total", "", n+1)
	if f := metricValue(t, preg, "velo_streaming_egress_flushes_total", ""); f < 1 || f > n+1 {
		t.Fatalf("egress flushes = %v, want 1..%d", f, n+1)
	}
	wantValue(t, creg, "velo_streaming_frames_written_total", "", 0)
	wantValue(t, creg, "velo_streaming_egress_flushes_total", "", 0)
}

// TestMetricsEgressPumpCountsOnlyWrites: frames that never reach the
// socket are not counted. The producer's connection is closed under its
// pump; an item sent after that either fails its write or is discarded
// when the watcher sees the close first. Both paths retire the stream as
// Discarded, and the counters keep the one write that succeeded.
func TestMetricsEgressPumpCountsOnlyWrites(t *testing.T) {
	preg, _, producer, consumer := metricNodes(t)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	if err := s.SendBytes(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	s.stream().Conn().Close()
	if err := s.SendBytes(context.Background(), []byte("y")); err != nil && !errors.Is(err, ErrCancelled) {
		t.Fatal(err)
	}
	select {
	case <-s.Retired():
		if out := s.Outcome(); out != RetireDiscarded {
			t.Fatalf("retired %v, want %v", out, RetireDiscarded)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream never retired")
	}
	wantValue(t, preg, "velo_streaming_frames_written_total", "", 1)
	wantValue(t, preg, "velo_streaming_egress_flushes_total", "", 1)
}

// TestMetricsReaderPumpBackpressure: a consumer that does not read fills
// its one-frame inlet, and the reader of the connection waits: the
// consumer's node counts reader-pump backpressure, not a producer's send
// backpressure, and the server-pump counter (no bind-side channel here)
// stays at zero.
func TestMetricsReaderPumpBackpressure(t *testing.T) {
	_, creg, producer, consumer := metricNodes(t)
	a, err := CreateAnchor[[]byte](consumer.sm, WithCapacity(1))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	const n = 3
	for i := range n {
		if err := s.SendBytes(context.Background(), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	const name = "velo_streaming_reader_pump_backpressure_total"
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(t, creg, name, "") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reader's push into a full inlet was never counted")
		}
		time.Sleep(time.Millisecond)
	}
	for range n {
		if _, err := nextItemWithin(t, a, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got := metricValue(t, creg, name, ""); got < 1 || got > n-1 {
		t.Fatalf("%s = %v, want 1..%d (once per frame that waited)", name, got, n-1)
	}
	wantValue(t, creg, "velo_streaming_producer_send_backpressure_total", "", 0)
	wantValue(t, creg, "velo_streaming_backpressure_total", "transport_scheme=local", 0)
	wantValue(t, creg, "velo_streaming_server_pump_backpressure_total", "", 0)
}

// TestMetricsRemoteRecordAllocations: the egress and reader counters add
// no allocation to a record on a stream between nodes. AllocsPerRun counts
// every goroutine's allocations (the pump's and the reader's included), so
// the two runs are compared, not held to a fixed figure.
func TestMetricsRemoteRecordAllocations(t *testing.T) {
	perRecord := func(opt ManagerOption) float64 {
		producer, consumer := newRemoteNode(t, opt), newRemoteNode(t, opt)
		if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
			t.Fatal(err)
		}
		producer.sm.remote.tcp.PauseHeartbeats(true)
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		s := attachRemoteT[[]byte](t, producer, a.Handle())
		ctx := context.Background()
		return testing.AllocsPerRun(1000, func() {
			if err := s.SendBytes(ctx, benchPayload); err != nil {
				t.Fatal(err)
			}
			if _, err := a.NextBytes(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	_, vm := newMetrics(t)
	without := perRecord(WithMetrics(nil))
	with := perRecord(WithMetrics(vm))
	t.Logf("allocations per remote record: %v without metrics, %v with", without, with)
	// A fraction of slack for the odd allocation of the runtime or the
	// messenger that lands in one window and not the other.
	if with > without+0.05 {
		t.Fatalf("metrics add %v allocations per remote record", with-without)
	}
}
