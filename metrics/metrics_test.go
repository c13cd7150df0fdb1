package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustRegister(t *testing.T) (*prometheus.Registry, *VeloMetrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := Register(reg)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return reg, m
}

// gather returns the registry's metrics of one family, keyed by their
// label pairs written as "k=v,k=v" in the order Prometheus sorts them.
func gather(t *testing.T, reg *prometheus.Registry, name string) map[string]*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]*dto.Metric{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(kv, ",")] = m
		}
	}
	return out
}

func TestRegisterTwiceFails(t *testing.T) {
	reg, _ := mustRegister(t)
	_, err := Register(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second Register: got %v, want AlreadyRegisteredError", err)
	}
}

// A clash on the last family must not leave the earlier ones behind.
func TestRegisterRollsBackOnClash(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "velo_messenger_inbound_dequeued_total", Help: "taken",
	}))
	if _, err := Register(reg); err == nil {
		t.Fatal("Register succeeded over a clashing family")
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
		t.Fatalf("after failed Register: %d series (err %v), want only the clashing one", n, err)
	}
	if _, err := Register(prometheus.NewRegistry()); err != nil {
		t.Fatalf("Register into a fresh registry: %v", err)
	}
}

func TestRegisterNil(t *testing.T) {
	if _, err := Register(nil); err == nil {
		t.Fatal("Register(nil) gave no error")
	}
}

func TestNilMetricsIsNop(t *testing.T) {
	var m *VeloMetrics
	o := m.Transport("tcp")
	if _, ok := o.(ext.NopObservability); !ok || o.Enabled() {
		t.Fatalf("nil VeloMetrics gave %T (enabled %v), want NopObservability", o, o.Enabled())
	}
}

// Every label combination exists at zero right after Transport, so a
// dashboard shows zeros rather than gaps before traffic arrives.
func TestTransportPrebindsEverySeries(t *testing.T) {
	reg, m := mustRegister(t)
	if o := m.Transport("tcp"); !o.Enabled() {
		t.Fatal("real handle reports Enabled false")
	}
	frames := gather(t, reg, "velo_transport_frames_total")
	bytes := gather(t, reg, "velo_transport_frame_bytes_total")
	written := gather(t, reg, "velo_transport_frames_written_total")
	for mt := range ext.NumMessageTypes {
		typ := ext.MessageType(mt).String()
		if _, ok := written["message_type="+typ+",transport=tcp"]; !ok {
			t.Errorf("frames_written missing message_type=%s", typ)
		}
		for _, dir := range []ext.Direction{ext.Inbound, ext.Outbound} {
			if _, ok := bytes["direction="+dir.String()+",message_type="+typ+",transport=tcp"]; !ok {
				t.Errorf("frame_bytes missing %s/%s", dir, typ)
			}
			for _, oc := range []ext.FrameOutcome{ext.Accepted, ext.Rejected} {
				k := "direction=" + dir.String() + ",message_type=" + typ + ",outcome=" + oc.String() + ",transport=tcp"
				s, ok := frames[k]
				if !ok {
					t.Errorf("frames_total missing %s", k)
				} else if v := s.GetCounter().GetValue(); v != 0 {
					t.Errorf("frames_total %s = %v before any traffic", k, v)
				}
			}
		}
	}
	if got, want := len(frames), 2*ext.NumMessageTypes*2; got != want {
		t.Errorf("frames_total has %d series, want %d", got, want)
	}
	rej := gather(t, reg, "velo_transport_rejections_total")
	for r := range ext.NumRejectionReasons {
		if _, ok := rej["reason="+ext.RejectionReason(r).String()+",transport=tcp"]; !ok {
			t.Errorf("rejections missing reason=%s", ext.RejectionReason(r))
		}
	}
	dropped := gather(t, reg, "velo_transport_connections_dropped_total")
	for d := range ext.NumConnectionDrops {
		if _, ok := dropped["reason="+ext.ConnectionDrop(d).String()+",transport=tcp"]; !ok {
			t.Errorf("connections_dropped missing reason=%s", ext.ConnectionDrop(d))
		}
	}
	for _, name := range []string{
		"velo_transport_egress_queue_wait_seconds", "velo_transport_write_duration_seconds",
		"velo_transport_send_backpressure_total", "velo_transport_registered_peers",
		"velo_transport_active_connections", "velo_transport_accept_errors_total",
	} {
		if _, ok := gather(t, reg, name)["transport=tcp"]; !ok {
			t.Errorf("%s{transport=tcp} missing", name)
		}
	}
}

func TestTransportRecords(t *testing.T) {
	reg, m := mustRegister(t)
	o := m.Transport("uds")
	o.Frames(ext.Outbound, ext.Message, ext.Accepted, 1, 100)
	o.Frames(ext.Outbound, ext.Message, ext.Accepted, 1, 20)
	o.Frames(ext.Inbound, ext.Event, ext.Rejected, 1, 7)
	o.Frames(ext.Inbound, ext.MessageType(200), ext.Accepted, 1, 9) // undefined type: dropped, no panic
	o.Rejection(ext.RejectTooLarge)
	o.Rejection(ext.RejectionReason(99)) // undefined reason: dropped
	o.SendBackpressure()
	o.RegisteredPeers(3)
	o.RegisteredPeers(-1)
	o.ActiveConnections(2)
	o.FramesWritten(ext.Response, 4)
	o.WriteDuration(3 * time.Millisecond)
	o.EgressQueueWait(5 * time.Microsecond)
	o.EgressQueueWait(7 * time.Microsecond)
	co, ok := o.(ext.ConnectionObservability)
	if !ok {
		t.Fatalf("the transport handle %T has no ConnectionObservability", o)
	}
	co.ConnectionDropped(ext.DropStalledFrame)
	co.ConnectionDropped(ext.DropStalledFrame)
	co.ConnectionDropped(ext.ConnectionDrop(99)) // undefined reason: dropped
	co.AcceptError()

	checks := []struct {
		c    prometheus.Collector
		want float64
	}{
		{m.frames.WithLabelValues("uds", "outbound", "message", "accepted"), 2},
		{m.frames.WithLabelValues("uds", "inbound", "event", "rejected"), 1},
		{m.frames.WithLabelValues("uds", "inbound", "event", "accepted"), 0},
		{m.frameBytes.WithLabelValues("uds", "outbound", "message"), 120},
		{m.frameBytes.WithLabelValues("uds", "inbound", "event"), 7},
		{m.rejections.WithLabelValues("uds", "too_large"), 1},
		{m.rejections.WithLabelValues("uds", "draining"), 0},
		{m.sendBackpress.WithLabelValues("uds"), 1},
		{m.registeredPeer.WithLabelValues("uds"), 2},
		{m.activeConns.WithLabelValues("uds"), 2},
		{m.framesWritten.WithLabelValues("uds", "response"), 4},
		{m.connsDropped.WithLabelValues("uds", "stalled_frame"), 2},
		{m.connsDropped.WithLabelValues("uds", "over_limit"), 0},
		{m.acceptErrors.WithLabelValues("uds"), 1},
	}
	for i, c := range checks {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("check %d: got %v, want %v", i, got, c.want)
		}
	}
	wait := gather(t, reg, "velo_transport_egress_queue_wait_seconds")["transport=uds"].GetHistogram()
	if wait.GetSampleCount() != 2 || wait.GetSampleSum() < 11e-6 || wait.GetSampleSum() > 13e-6 {
		t.Errorf("egress wait: count %d sum %v, want 2 and 12µs", wait.GetSampleCount(), wait.GetSampleSum())
	}
	write := gather(t, reg, "velo_transport_write_duration_seconds")["transport=uds"].GetHistogram()
	if write.GetSampleCount() != 1 || write.GetSampleSum() != 0.003 {
		t.Errorf("write duration: count %d sum %v, want 1 and 0.003", write.GetSampleCount(), write.GetSampleSum())
	}
}

// The frame path runs once per frame; it must not allocate.
func TestTransportNoAllocs(t *testing.T) {
	_, m := mustRegister(t)
	o := m.Transport("tcp")
	for name, f := range map[string]func(){
		"Frames":          func() { o.Frames(ext.Outbound, ext.Response, ext.Accepted, 1, 64) },
		"FramesWritten":   func() { o.FramesWritten(ext.Message, 3) },
		"EgressQueueWait": func() { o.EgressQueueWait(time.Microsecond) },
		"WriteDuration":   func() { o.WriteDuration(time.Microsecond) },
		"Rejection":       func() { o.Rejection(ext.RejectDraining) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

func TestHandlerBinds(t *testing.T) {
	_, m := mustRegister(t)
	h := m.Handler("echo")
	h.InFlight.Inc()
	h.OrderedLanesCreated.Inc()
	h.OrderedLaneWait.Observe(0.001)
	if got := testutil.ToFloat64(m.HandlerInFlight.WithLabelValues("echo")); got != 1 {
		t.Errorf("in_flight{handler=echo} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.OrderedLanesCreated.WithLabelValues("echo")); got != 1 {
		t.Errorf("ordered_lanes_created{handler=echo} = %v, want 1", got)
	}
}

// The small Streaming series exist, at zero, once the handle is built; the
// operation and attach families have a series only for the label sets
// recorded into; and one VeloMetrics hands out one handle.
func TestStreamingBindsOnFirstUse(t *testing.T) {
	reg, m := mustRegister(t)
	s := m.Streaming()
	if s == nil || m.Streaming() != s {
		t.Fatal("Streaming: want one non-nil handle per VeloMetrics")
	}
	lazy := []string{
		"velo_streaming_anchor_operations_total",
		"velo_streaming_anchor_operation_duration_seconds",
		"velo_streaming_anchor_attach_rtt_seconds",
	}
	for _, name := range lazy {
		if got := len(gather(t, reg, name)); got != 0 {
			t.Errorf("%s: %d series before any record, want 0", name, got)
		}
	}
	s.Operation(StreamCreate, SchemeLocal, true, time.Millisecond)
	s.Operation(StreamCreate, SchemeLocal, true, time.Millisecond)
	s.AttachRTT(SchemeMux, false, time.Millisecond)
	for _, name := range lazy {
		if got := len(gather(t, reg, name)); got != 1 {
			t.Errorf("%s: %d series after records into one label set, want 1", name, got)
		}
	}
	if n := gather(t, reg, "velo_streaming_anchor_operation_duration_seconds")["operation=create,outcome=success,transport_scheme=local"].GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("create duration count = %d, want 2", n)
	}
	for name, want := range map[string]int{
		"velo_streaming_backpressure_total":               int(NumStreamSchemes - MaxPluginSchemes), // the built-in schemes
		"velo_streaming_anchors_created_total":            2,
		"velo_streaming_producer_send_backpressure_total": 1,
		"velo_streaming_reader_pump_backpressure_total":   1,
		"velo_streaming_server_pump_backpressure_total":   1,
		"velo_streaming_frames_written_total":             1,
		"velo_streaming_egress_flushes_total":             1,
		"velo_streaming_heartbeat_watchdog_firings_total": 1,
		"velo_streaming_unattached_timeouts_total":        1,
		"velo_streaming_active_anchors":                   1,
	} {
		if got := len(gather(t, reg, name)); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
	untrack := s.TrackActive(func() int { return 4 })
	s.TrackActive(func() int { return 3 })()
	if v := gather(t, reg, "velo_streaming_active_anchors")[""].GetGauge().GetValue(); v != 4 {
		t.Fatalf("active anchors = %v, want 4", v)
	}
	untrack()
	untrack()
	if v := gather(t, reg, "velo_streaming_active_anchors")[""].GetGauge().GetValue(); v != 0 {
		t.Fatalf("active anchors after untrack = %v, want 0", v)
	}
}

func TestStreamingNilAndRecords(t *testing.T) {
	var nilM *VeloMetrics
	if nilM.Streaming() != nil {
		t.Fatal("nil VeloMetrics gave a Streaming handle")
	}
	reg, m := mustRegister(t)
	s := m.Streaming()
	s.Operation(StreamAttach, SchemeTCPStream, false, time.Millisecond)
	s.Operation(NumStreamOps, SchemeLocal, true, 0) // out of range: dropped
	s.ProducerBackpressure(SchemeTCPStream)
	s.AnchorCreated(true)
	s.WatchdogFiring()
	s.UnattachedTimeout()
	s.AttachRTT(SchemeOf("tcp-stream"), true, time.Millisecond)
	s.ReaderPumpBackpressure()
	s.EgressFlushed(1)
	for name, labels := range map[string]string{
		"velo_streaming_reader_pump_backpressure_total":   "",
		"velo_streaming_frames_written_total":             "",
		"velo_streaming_egress_flushes_total":             "",
		"velo_streaming_anchor_operations_total":          "operation=attach,outcome=error,transport_scheme=tcp-stream",
		"velo_streaming_backpressure_total":               "transport_scheme=tcp-stream",
		"velo_streaming_producer_send_backpressure_total": "",
		"velo_streaming_anchors_created_total":            "kind=mpsc",
		"velo_streaming_heartbeat_watchdog_firings_total": "",
		"velo_streaming_unattached_timeouts_total":        "",
	} {
		if v := gather(t, reg, name)[labels].GetCounter().GetValue(); v != 1 {
			t.Errorf("%s{%s} = %v, want 1", name, labels, v)
		}
	}
	if n := gather(t, reg, "velo_streaming_anchor_attach_rtt_seconds")["outcome=success,transport_scheme=tcp-stream"].GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("attach rtt count = %d, want 1", n)
	}
}

// The per-stream pump and reader record once per write and once per wait;
// neither may allocate.
func TestStreamingNoAllocs(t *testing.T) {
	reg, m := mustRegister(t)
	s := m.Streaming()
	for name, f := range map[string]func(){
		"EgressFlushed":          func() { s.EgressFlushed(3) },
		"ReaderPumpBackpressure": func() { s.ReaderPumpBackpressure() },
		"ProducerBackpressure":   func() { s.ProducerBackpressure(SchemeTCPStream) },
		// Bound by AllocsPerRun's warm-up call; none after it.
		"Operation": func() { s.Operation(StreamAttach, SchemeMux, true, time.Microsecond) },
		"AttachRTT": func() { s.AttachRTT(SchemeMux, true, time.Microsecond) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
	// AllocsPerRun makes one warm-up call before its 1000.
	frames := gather(t, reg, "velo_streaming_frames_written_total")[""].GetCounter().GetValue()
	flushes := gather(t, reg, "velo_streaming_egress_flushes_total")[""].GetCounter().GetValue()
	if frames != 3*1001 || flushes != 1001 {
		t.Fatalf("frames %v, flushes %v; want %v and 1001", frames, flushes, 3*1001)
	}
}

// FrameScheme names the built-in keys by their fixed schemes, gives the
// key of a frame transport from outside velo a scheme labelled with it,
// the same one each time, and folds keys past MaxPluginSchemes (and the
// labels that are not transports) into "unknown".
func TestFrameSchemeLabelsTheKey(t *testing.T) {
	reg, m := mustRegister(t)
	s := m.Streaming()
	for key, want := range map[string]StreamScheme{
		"tcp-stream": SchemeTCPStream, "tls-stream": SchemeTLSStream, "grpc-stream": SchemeGRPCStream,
		"messenger-mux-v2": SchemeMux, "local": SchemeUnknown, "unknown": SchemeUnknown, "": SchemeUnknown,
	} {
		if got := s.FrameScheme(key); got != want {
			t.Errorf("FrameScheme(%q) = %v, want %v", key, got, want)
		}
	}
	var nilS *StreamingMetrics
	if nilS.FrameScheme("grpc-stream") != SchemeGRPCStream || nilS.FrameScheme("mine") != SchemeUnknown {
		t.Error("FrameScheme on nil")
	}
	first := s.FrameScheme("mine-0")
	if first == SchemeUnknown || s.FrameScheme("mine-0") != first {
		t.Fatalf("a plugin key's scheme: %v, then %v", first, s.FrameScheme("mine-0"))
	}
	for i := 1; i < MaxPluginSchemes; i++ {
		if sc := s.FrameScheme(fmt.Sprint("mine-", i)); sc == SchemeUnknown || sc == first {
			t.Fatalf("plugin key %d: %v", i, sc)
		}
	}
	if sc := s.FrameScheme("one-too-many"); sc != SchemeUnknown {
		t.Fatalf("a key past MaxPluginSchemes: %v, want SchemeUnknown", sc)
	}
	s.Operation(StreamAttach, first, true, time.Millisecond)
	s.AttachRTT(first, true, time.Millisecond)
	s.ProducerBackpressure(first)
	s.Operation(StreamDetach, SchemeGRPCStream, true, time.Millisecond)
	if v := gather(t, reg, "velo_streaming_anchor_operations_total")["operation=attach,outcome=success,transport_scheme=mine-0"].GetCounter().GetValue(); v != 1 {
		t.Errorf("the plugin's attach = %v, want 1", v)
	}
	if v := gather(t, reg, "velo_streaming_anchor_operations_total")["operation=detach,outcome=success,transport_scheme=grpc-stream"].GetCounter().GetValue(); v != 1 {
		t.Errorf("the grpc-stream detach = %v, want 1", v)
	}
	if n := gather(t, reg, "velo_streaming_anchor_attach_rtt_seconds")["outcome=success,transport_scheme=mine-0"].GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("the plugin's attach rtt = %d, want 1", n)
	}
	bp := gather(t, reg, "velo_streaming_backpressure_total")
	if v := bp["transport_scheme=mine-0"].GetCounter().GetValue(); v != 1 {
		t.Errorf("the plugin's backpressure = %v, want 1", v)
	}
	for _, k := range []string{"tls-stream", "grpc-stream", "mine-1"} {
		if _, ok := bp["transport_scheme="+k]; !ok {
			t.Errorf("no backpressure_total series for %s", k)
		}
	}
	if _, ok := bp["transport_scheme=one-too-many"]; ok {
		t.Error("a key past the bound got a series")
	}
}
