package velo_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
)

// family is one metric family as the reference lists it: its kind and
// its label names (sorted; "le" of a histogram left out).
type family struct {
	kind   string
	labels []string
}

// chapter33 is the velo book's metrics reference, family by family,
// transcribed by hand. A family missing from a scrape, of another type,
// or with other label names fails TestChapter33FamiliesOnARunningPair.
var chapter33 = map[string]family{
	// Transport.
	"velo_transport_frames_total":              {"counter", []string{"direction", "message_type", "outcome", "transport"}},
	"velo_transport_frame_bytes_total":         {"counter", []string{"direction", "message_type", "transport"}},
	"velo_transport_frames_written_total":      {"counter", []string{"message_type", "transport"}},
	"velo_transport_egress_queue_wait_seconds": {"histogram", []string{"transport"}},
	"velo_transport_write_duration_seconds":    {"histogram", []string{"transport"}},
	"velo_transport_rejections_total":          {"counter", []string{"reason", "transport"}},
	"velo_transport_send_backpressure_total":   {"counter", []string{"transport"}},
	"velo_transport_registered_peers":          {"gauge", []string{"transport"}},
	"velo_transport_active_connections":        {"gauge", []string{"transport"}},
	// Messenger.
	"velo_messenger_handler_requests_total":        {"counter", []string{"handler", "outcome", "response_type"}},
	"velo_messenger_handler_duration_seconds":      {"histogram", []string{"handler", "outcome", "response_type"}},
	"velo_messenger_handler_request_bytes_total":   {"counter", []string{"handler", "response_type"}},
	"velo_messenger_handler_response_bytes_total":  {"counter", []string{"handler", "outcome", "response_type"}},
	"velo_messenger_handler_in_flight":             {"gauge", []string{"handler"}},
	"velo_messenger_ordered_lanes":                 {"gauge", []string{"handler"}},
	"velo_messenger_ordered_lane_depth":            {"gauge", []string{"handler"}},
	"velo_messenger_ordered_lane_wait_seconds":     {"histogram", []string{"handler"}},
	"velo_messenger_ordered_lanes_created_total":   {"counter", []string{"handler"}},
	"velo_messenger_dispatch_failures_total":       {"counter", []string{"reason", "stage"}},
	"velo_messenger_client_resolution_total":       {"counter", []string{"outcome", "path"}},
	"velo_messenger_pending_responses":             {"gauge", nil},
	"velo_messenger_response_slot_exhausted_total": {"counter", nil},
	"velo_messenger_inbound_dequeued_total":        {"counter", nil},
	// Streaming.
	"velo_streaming_anchor_operations_total":           {"counter", []string{"operation", "outcome", "transport_scheme"}},
	"velo_streaming_anchor_operation_duration_seconds": {"histogram", []string{"operation", "outcome", "transport_scheme"}},
	"velo_streaming_anchor_attach_rtt_seconds":         {"histogram", []string{"outcome", "transport_scheme"}},
	"velo_streaming_active_anchors":                    {"gauge", nil},
	"velo_streaming_backpressure_total":                {"counter", []string{"transport_scheme"}},
	"velo_streaming_reader_pump_backpressure_total":    {"counter", nil},
	"velo_streaming_server_pump_backpressure_total":    {"counter", nil},
	"velo_streaming_producer_send_backpressure_total":  {"counter", nil},
	"velo_streaming_heartbeat_watchdog_firings_total":  {"counter", nil},
	"velo_streaming_unclaimed_bind_reaped_total":       {"counter", nil},
	"velo_streaming_egress_flushes_total":              {"counter", nil},
	"velo_streaming_frames_written_total":              {"counter", nil},
	"velo_streaming_slot_credit_exhausted_total":       {"counter", nil},
	// Batched streaming (mux).
	"velo_streaming_mux_live_slots":                  {"gauge", nil},
	"velo_streaming_mux_reader_stall_total":          {"counter", nil},
	"velo_streaming_mux_generation_mismatch_total":   {"counter", nil},
	"velo_streaming_mux_records_dropped_total":       {"counter", []string{"reason"}},
	"velo_streaming_mux_batches_total":               {"counter", []string{"direction"}},
	"velo_streaming_mux_records_per_batch":           {"histogram", []string{"direction"}},
	"velo_streaming_mux_rendezvous_singletons_total": {"counter", nil},
	"velo_streaming_mux_held_records":                {"gauge", nil},
	"velo_streaming_mux_withheld_records":            {"gauge", nil},
	"velo_streaming_mux_staged_records":              {"gauge", nil},
	"velo_streaming_mux_control_refused_total":       {"counter", nil},
	"velo_streaming_mux_hold_overflow_total":         {"counter", nil},
	"velo_streaming_mux_epoch_deaths_total":          {"counter", nil},
	"velo_streaming_mux_credit_reposted_total":       {"counter", nil},
	"velo_streaming_mux_credit_lost_total":           {"counter", nil},
	"velo_streaming_mux_batch_seq_gaps_total":        {"counter", nil},
	"velo_streaming_mux_drain_visits_total":          {"counter", nil},
	"velo_streaming_mux_records_sent_total":          {"counter", []string{"record_type"}},
	"velo_streaming_mux_batcher_wakes_total":         {"counter", []string{"source"}},
	// Rendezvous and RDMA.
	"velo_rendezvous_operations_total":           {"counter", []string{"operation", "outcome"}},
	"velo_rendezvous_operation_duration_seconds": {"histogram", []string{"operation", "outcome"}},
	"velo_rendezvous_bytes_total":                {"counter", []string{"operation"}},
	"velo_rendezvous_active_slots":               {"gauge", nil},
	"velo_rdma_registered_bytes":                 {"gauge", nil},
	"velo_rdma_registrations_total":              {"counter", []string{"kind"}},
	"velo_rdma_live_regions":                     {"gauge", nil},
	"velo_rendezvous_rdma_path_total":            {"counter", []string{"path", "reason"}},
	"velo_rendezvous_rdma_get_duration_seconds":  {"histogram", nil},
	"velo_rendezvous_rdma_leases_reaped_total":   {"counter", nil},
}

// ours are the families this build adds to the reference's (each
// described in docs/metrics.md). A scraped family on neither list fails
// the test, so that a new family is either the book's or documented here.
var ours = map[string]family{
	"velo_transport_connections_dropped_total":     {"counter", []string{"reason", "transport"}},
	"velo_transport_accept_errors_total":           {"counter", []string{"transport"}},
	"velo_messenger_ordered_lane_over_depth_total": {"counter", []string{"handler"}},
	"velo_messenger_spawn_queue_waits_total":       {"counter", []string{"handler"}},
	"velo_streaming_anchors_created_total":         {"counter", []string{"kind"}},
	"velo_streaming_unattached_timeouts_total":     {"counter", nil},
	"velo_streaming_mux_replies_discarded_total":   {"counter", nil},
	"velo_rendezvous_refusals_total":               {"counter", []string{"operation", "reason"}},
}

// fixedLabelValues are the label values the book fixes, and the values
// this build gives the mux's wake sources; a scrape must carry each one.
var fixedLabelValues = map[string]map[string][]string{
	"velo_streaming_mux_batches_total":         {"direction": {"sent", "received"}},
	"velo_streaming_mux_records_per_batch":     {"direction": {"sent", "received"}},
	"velo_streaming_mux_records_dropped_total": {"reason": {"stale_epoch", "generation", "unknown_slot", "closed_slot", "lane_mismatch", "slot_collision"}},
	"velo_streaming_mux_batcher_wakes_total":   {"source": {"open", "control", "frame", "departed", "linger"}},
	"velo_rdma_registrations_total":            {"kind": {"arena", "external"}},
}

// parsedFamily is what one scrape says of a family.
type parsedFamily struct {
	kind   string
	labels map[string]map[string]bool // name -> values
}

// parseExposition reads the families of a text-format scrape: each one's
// TYPE, and the label names and values of its samples (a histogram's
// _bucket, _sum and _count folded into it, its "le" left out).
func parseExposition(t *testing.T, body string) map[string]*parsedFamily {
	t.Helper()
	fams := map[string]*parsedFamily{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(rest, " ")
			fams[name] = &parsedFamily{kind: kind, labels: map[string]map[string]bool{}}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels := line, ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name, labels = line[:i], line[i+1:strings.LastIndexByte(line, '}')]
		} else {
			name, _, _ = strings.Cut(line, " ")
		}
		f := fams[name]
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if f == nil {
				if base, ok := strings.CutSuffix(name, suf); ok && fams[base] != nil && fams[base].kind == "histogram" {
					f = fams[base]
				}
			}
		}
		if f == nil {
			t.Fatalf("sample %q of no declared family", line)
		}
		for _, pair := range splitLabels(labels) {
			k, v, _ := strings.Cut(pair, "=")
			if k == "le" && f.kind == "histogram" {
				continue
			}
			if f.labels[k] == nil {
				f.labels[k] = map[string]bool{}
			}
			f.labels[k][strings.Trim(v, `"`)] = true
		}
	}
	return fams
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func (f *parsedFamily) labelNames() []string {
	var names []string
	for k := range f.labels {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// runningPair is a real setup, each node with a registry of its own:
// server and client over TCP with the mux, and a third node with the mux
// disabled whose stream takes the per-stream TCP path. It has run a unary
// call, an ordered call, a call to an unknown handler and one to an
// unregistered peer, a payload staged through rendezvous, a stream over
// the mux and a per-stream stream. Its scrapes are the text a Prometheus
// server would fetch.
type runningPair struct {
	scrapes map[string]string // node name -> scrape
}

func runPair(t *testing.T) runningPair {
	t.Helper()
	regs := map[string]*prometheus.Registry{}
	withMetrics := func(name string) velo.Option {
		reg, vm := registered(t)
		regs[name] = reg
		return velo.WithMetrics(vm)
	}
	server := node(t, withMetrics("server"))
	client := node(t, withMetrics("client"), velo.WithStagingThreshold(1024))
	perStream := node(t, withMetrics("per-stream"), velo.WithMux(streaming.MuxConfig{Disabled: true}))
	echo := func(c *velo.Context) ([]byte, error) { return c.Payload[:1], nil }
	for _, h := range []velo.Handler{velo.UnaryHandler("echo", echo), velo.UnaryHandler("ordered", echo, velo.WithOrdered())} {
		if err := server.Register(h); err != nil {
			t.Fatal(err)
		}
	}
	for _, peer := range []*velo.Node{client, perStream} {
		if err := peer.RegisterPeer(server.PeerInfo()); err != nil {
			t.Fatal(err)
		}
		if err := server.RegisterPeer(peer.PeerInfo()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	to := server.InstanceID()
	for _, p := range [][]byte{[]byte("x"), make([]byte, 4096)} { // the second is staged
		for _, h := range []string{"echo", "ordered"} {
			if _, err := client.Unary(ctx, to, h, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := client.Unary(ctx, to, "no-such-handler", nil); err == nil {
		t.Fatal("a call to an unknown handler succeeded")
	}
	if _, err := client.Unary(ctx, ext.NewInstanceID(), "echo", nil); err == nil {
		t.Fatal("a call to an unregistered peer succeeded")
	}
	streamTo(ctx, t, server, client, "messenger-mux-v2")
	streamTo(ctx, t, server, perStream, "tcp-stream")
	out := runningPair{scrapes: map[string]string{}}
	for name, reg := range regs {
		out.scrapes[name] = scrape(t, reg).body
	}
	return out
}

// streamTo streams three items from producer into an anchor on owner,
// and checks the stream negotiated want.
func streamTo(ctx context.Context, t *testing.T, owner, producer *velo.Node, want string) {
	t.Helper()
	anchor, err := streaming.CreateAnchor[[]byte](owner.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer anchor.Close()
	s, err := streaming.AttachAnchor[[]byte](ctx, producer.Streams, anchor.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.NegotiatedTransport(); got != want {
		t.Fatalf("the stream negotiated %q, want %q", got, want)
	}
	for range 3 {
		if err := s.Send(ctx, []byte("token")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range anchor.All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("%d items over %s, want 3", n, want)
	}
}

// TestChapter33FamiliesOnARunningPair: every family of the book's metrics
// reference is in a scrape of the running setup, with the book's type and
// label names, and the label values the book fixes; every other family
// scraped is one of ours. Each scrape also passes promtool (see
// checkWithPromtool).
func TestChapter33FamiliesOnARunningPair(t *testing.T) {
	run := runPair(t)
	union := map[string]*parsedFamily{}
	for name, body := range run.scrapes {
		checkWithPromtool(t, name, body)
		for fname, f := range parseExposition(t, body) {
			u := union[fname]
			if u == nil {
				union[fname] = f
				continue
			}
			if u.kind != f.kind {
				t.Errorf("%s: type %s on one node, %s on another", fname, u.kind, f.kind)
			}
			for k, vs := range f.labels {
				if u.labels[k] == nil {
					u.labels[k] = map[string]bool{}
				}
				for v := range vs {
					u.labels[k][v] = true
				}
			}
		}
	}
	check := func(name string, want family, required bool) {
		got, ok := union[name]
		if !ok {
			if required {
				t.Errorf("%s: not in any scrape", name)
			}
			return
		}
		if got.kind != want.kind {
			t.Errorf("%s: type %s, want %s", name, got.kind, want.kind)
		}
		if names := got.labelNames(); !slices.Equal(names, want.labels) {
			t.Errorf("%s: labels %v, want %v", name, names, want.labels)
		}
	}
	for name, want := range chapter33 {
		check(name, want, true)
	}
	for name, want := range ours { // some are made on first use only (a refusal)
		check(name, want, false)
	}
	for name := range union {
		if _, book := chapter33[name]; !book {
			if _, own := ours[name]; !own {
				t.Errorf("%s: scraped, but neither the book's nor listed as ours", name)
			}
		}
	}
	for name, byLabel := range fixedLabelValues {
		for label, values := range byLabel {
			for _, v := range values {
				if f := union[name]; f == nil || !f.labels[label][v] {
					t.Errorf(`%s: no series with %s="%s"`, name, label, v)
				}
			}
		}
	}
	// The traffic reached what it was meant to: both stream paths, the
	// staged payload's chunked path on both sides, and the mux's batchers.
	for _, want := range []struct{ node, series string }{
		{"server", `velo_streaming_anchor_operations_total{operation="attach",outcome="success",transport_scheme="messenger-mux-v2"}`},
		{"server", `velo_streaming_anchor_operations_total{operation="attach",outcome="success",transport_scheme="tcp-stream"}`},
		{"client", `velo_rendezvous_rdma_path_total{path="chunked",reason="no_offer"}`},
		{"server", `velo_rendezvous_rdma_path_total{path="chunked",reason="not_configured"}`},
		{"per-stream", `velo_streaming_frames_written_total`},
	} {
		if v := sampleValue(run.scrapes[want.node], want.series); v <= 0 {
			t.Errorf("%s: %s is %v, want above 0", want.node, want.series, v)
		}
	}
	// Which source woke the client's batchers depends on timing (a wake
	// that finds the batcher awake is no wake); that they are counted
	// does not. streaming.TestMuxBatcherWakesBySource pins the sources.
	wakes := 0.0
	for _, src := range fixedLabelValues["velo_streaming_mux_batcher_wakes_total"]["source"] {
		wakes += sampleValue(run.scrapes["client"], `velo_streaming_mux_batcher_wakes_total{source="`+src+`"}`)
	}
	if wakes <= 0 {
		t.Errorf("client: no batcher wake counted, though it streamed over the mux")
	}
}

// sampleValue is the value of the sample written exactly as series in
// body, or -1 when there is none.
func sampleValue(body, series string) float64 {
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(strings.TrimSpace(rest), &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// checkWithPromtool runs `promtool check metrics` on one scrape: it
// parses the text and lints it (names, units, HELP, counter suffixes).
// promtool comes from Debian's prometheus package, which .ci/run
// installs. Without it the test is skipped here, and fails under VELO_CI.
func checkWithPromtool(t *testing.T, name, body string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("VELO_CI") != "" {
			t.Fatalf("promtool not found under VELO_CI: %v", err)
		}
		t.Logf("promtool not found (apt-get install prometheus): the %s scrape is not checked", name)
		return
	}
	if dir := os.Getenv("VELO_SCRAPE_DIR"); dir != "" { // keep the text, for a look or a plot
		if err := os.WriteFile(filepath.Join(dir, name+".prom"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics on the %s scrape: %v\n%s", name, err, out)
	}
}
