package velo_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming"
)

// The bounds on one node's scrape (issue 21): an idle node, and a node
// that has served five user handlers.
const (
	idleSamplesMax    = 400
	idleBytesMax      = 64 << 10
	servingSamplesMax = 1000
)

// scrapeResult is one scrape of a registry in the Prometheus text format,
// as a Prometheus server would fetch it.
type scrapeResult struct {
	body    string
	samples int                        // lines that are not comments
	labels  map[string]map[string]bool // label name -> values seen
}

func scrape(t *testing.T, reg *prometheus.Registry) scrapeResult {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: HTTP %d", rec.Code)
	}
	r := scrapeResult{body: rec.Body.String(), labels: map[string]map[string]bool{}}
	sc := bufio.NewScanner(strings.NewReader(r.body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r.samples++
		open, end := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
		if open < 0 || end < open {
			continue
		}
		for _, pair := range strings.Split(line[open+1:end], ",") {
			k, v, _ := strings.Cut(pair, "=")
			if r.labels[k] == nil {
				r.labels[k] = map[string]bool{}
			}
			r.labels[k][strings.Trim(v, `"`)] = true
		}
	}
	return r
}

func registered(t *testing.T) (*prometheus.Registry, *metrics.VeloMetrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	vm, err := metrics.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, vm
}

// TestIdleNodeScrape: a node with metrics and one TCP transport that has
// served nothing scrapes small. Before series were bound on first use it
// was 7,749 samples and 997 KB, most of it handler histograms of velo's
// own handlers.
func TestIdleNodeScrape(t *testing.T) {
	reg, vm := registered(t)
	node(t, velo.WithMetrics(vm))
	s := scrape(t, reg)
	t.Logf("idle node: %d samples, %d bytes", s.samples, len(s.body))
	if s.samples > idleSamplesMax || len(s.body) > idleBytesMax {
		t.Errorf("idle node: %d samples and %d bytes, want at most %d and %d", s.samples, len(s.body), idleSamplesMax, idleBytesMax)
	}
	if len(s.labels["handler"]) != 0 {
		t.Errorf("idle node: series for handlers %v, want none before a handler runs", s.labels["handler"])
	}
}

// servedNode is a node with five user handlers of every response type and
// dispatch mode, each called a few times from a second node.
func servedNode(t *testing.T, opts ...velo.Option) scrapeResult {
	t.Helper()
	reg, vm := registered(t)
	server := node(t, append([]velo.Option{velo.WithMetrics(vm)}, opts...)...)
	client := node(t)
	fired := make(chan struct{}, 16)
	echo := func(c *velo.Context) ([]byte, error) { return c.Payload, nil }
	for _, h := range []velo.Handler{
		velo.UnaryHandler("echo", echo),
		velo.UnaryHandler("ordered", echo, velo.WithOrdered()),
		velo.UnaryHandler("fails", func(*velo.Context) ([]byte, error) { return nil, errors.New("no") }),
		velo.SyncHandler("ack", func(*velo.Context) error { return nil }),
		velo.FireHandler("fire", func(*velo.Context) { fired <- struct{}{} }),
	} {
		if err := server.Register(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	to := server.InstanceID()
	for i := range 3 {
		p := []byte(fmt.Sprint(i))
		for _, h := range []string{"echo", "ordered"} {
			if _, err := client.Unary(ctx, to, h, p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := client.Unary(ctx, to, "fails", p); err == nil {
			t.Fatal("fails succeeded")
		}
		if err := client.Sync(ctx, to, "ack", p); err != nil {
			t.Fatal(err)
		}
		if err := client.Send(ctx, to, "fire", p); err != nil {
			t.Fatal(err)
		}
		<-fired
	}
	return scrape(t, reg)
}

// TestServingNodeScrape: a node that served five user handlers stays
// under its bound; each handler has its own series, and velo's own
// handlers are counted together under handler="_system".
func TestServingNodeScrape(t *testing.T) {
	s := servedNode(t)
	t.Logf("node serving 5 handlers: %d samples, %d bytes", s.samples, len(s.body))
	if s.samples > servingSamplesMax {
		t.Errorf("node serving 5 handlers: %d samples, want at most %d", s.samples, servingSamplesMax)
	}
	for _, h := range []string{"echo", "ordered", "fails", "ack", "fire"} {
		if !s.labels["handler"][h] {
			t.Errorf("no series for handler %q", h)
		}
	}
	// The client's _hello ran (and was counted) before its first call.
	if !s.labels["handler"][msgwire.SystemHandlerLabel] {
		t.Error(`no handler="_system" series, though _hello ran`)
	}
	for h := range s.labels["handler"] {
		if strings.HasPrefix(h, "_") && h != msgwire.SystemHandlerLabel {
			t.Errorf("series for system handler %q without WithSystemHandlerMetrics", h)
		}
	}
	// Only the response types and outcomes that happened are bound.
	for _, unbound := range []string{
		`velo_messenger_handler_requests_total{handler="echo",outcome="error"`,
		`velo_messenger_handler_requests_total{handler="fire",outcome="success",response_type="unary"}`,
		`velo_messenger_ordered_lanes{handler="echo"}`,
	} {
		if strings.Contains(s.body, unbound) {
			t.Errorf("scrape has %s…, a series nothing recorded into", unbound)
		}
	}
	if !strings.Contains(s.body, `velo_messenger_ordered_lanes_created_total{handler="ordered"} 1`) {
		t.Error("the ordered handler's lane was not counted")
	}
}

// TestSystemHandlerMetrics: with WithSystemHandlerMetrics, velo's own
// handlers that ran have series of their own, and no "_system" series.
func TestSystemHandlerMetrics(t *testing.T) {
	s := servedNode(t, velo.WithSystemHandlerMetrics())
	var system []string
	for h := range s.labels["handler"] {
		if strings.HasPrefix(h, "_") {
			system = append(system, h)
		}
	}
	t.Logf("system handlers with series: %v, %d samples", system, s.samples)
	if s.labels["handler"][msgwire.SystemHandlerLabel] {
		t.Error(`handler="_system" series with WithSystemHandlerMetrics`)
	}
	if !s.labels["handler"]["_hello"] {
		t.Error(`no handler="_hello" series with WithSystemHandlerMetrics, though _hello ran`)
	}
}

// docFamilies are the family names docs/metrics.md lists (the metrics
// package's TestDocsListEveryFamily holds that list to the families a
// registry can expose, both ways).
func docFamilies(t *testing.T) (page string, fams []string) {
	t.Helper()
	b, err := os.ReadFile("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range regexp.MustCompile(`velo_[a-z0-9_]+`).FindAllString(string(b), -1) {
		if strings.HasSuffix(n, "_") || strings.HasSuffix(n, "_bucket") {
			continue
		}
		if !seen[n] {
			seen[n] = true
			fams = append(fams, n)
		}
	}
	return string(b), fams
}

// moved reports the families of reg that something recorded into: a
// counter or histogram with a sample above zero, a gauge with a series.
func moved(t *testing.T, reg *prometheus.Registry, into map[string]bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetCounter().GetValue() > 0 || m.GetHistogram().GetSampleCount() > 0 || m.Gauge != nil {
				into[mf.GetName()] = true
			}
		}
	}
}

// quietFamilies move only on faults, overload, backpressure or a path the
// traffic of TestMetricsSnippetFillsEveryFamily does not take. Each is
// moved by a test of its own subsystem.
var quietFamilies = map[string]string{
	"velo_transport_rejections_total":                 "a frame refused",
	"velo_transport_send_backpressure_total":          "a full peer channel",
	"velo_transport_connections_dropped_total":        "an inbound connection over a limit",
	"velo_transport_accept_errors_total":              "a failed accept",
	"velo_messenger_ordered_lane_over_depth_total":    "a lane past its depth",
	"velo_messenger_spawn_queue_waits_total":          "a spawn queue past its bound",
	"velo_messenger_dispatch_failures_total":          "a refused request",
	"velo_messenger_client_resolution_total":          "a call to an unregistered peer",
	"velo_messenger_response_slot_exhausted_total":    "every response slot busy",
	"velo_streaming_backpressure_total":               "a full stream",
	"velo_streaming_producer_send_backpressure_total": "a full stream",
	"velo_streaming_reader_pump_backpressure_total":   "a full per-stream inlet",
	"velo_streaming_server_pump_backpressure_total":   "never moves (docs/metrics.md)",
	"velo_streaming_frames_written_total":             "the per-stream TCP path, not the mux",
	"velo_streaming_egress_flushes_total":             "the per-stream TCP path, not the mux",
	"velo_streaming_heartbeat_watchdog_firings_total": "a silent producer",
	"velo_streaming_unattached_timeouts_total":        "an anchor nobody attached",
	"velo_streaming_mux_reader_stall_total":           "must stay zero",
	"velo_streaming_mux_generation_mismatch_total":    "a stale slot generation",
	"velo_streaming_mux_control_refused_total":        "control for a slot never opened",
	"velo_streaming_mux_epoch_deaths_total":           "a lost peer",
	"velo_streaming_mux_credit_lost_total":            "must stay zero",
	"velo_streaming_mux_credit_reposted_total":        "a refused batch",
	"velo_streaming_mux_batch_seq_gaps_total":         "a lost batch",
	"velo_streaming_mux_drain_visits_total":           "a consumer that drained a full slot",
	"velo_streaming_mux_hold_overflow_total":          "an overflowing hold",
	"velo_streaming_mux_rendezvous_singletons_total":  "a record above the eager budget",
	"velo_streaming_mux_records_dropped_total":        "a record refused",
	"velo_streaming_mux_replies_discarded_total":      "a peer that cannot be reached",
	"velo_streaming_slot_credit_exhausted_total":      "a slot out of credit",
	"velo_streaming_unclaimed_bind_reaped_total":      "a bind nobody claimed",
	"velo_rendezvous_refusals_total":                  "a refused request",
	// No RDMA backend in this build: these stay 0 (docs/metrics.md).
	"velo_rendezvous_rdma_get_duration_seconds": "an RDMA GET",
	"velo_rendezvous_rdma_leases_reaped_total":  "an RDMA lease past its deadline",
	"velo_rdma_registrations_total":             "an RDMA memory registration",
}

// TestMetricsSnippetFillsEveryFamily: two nodes wired as the snippet of
// docs/metrics.md wires one (velo.WithMetrics, nothing else) fill every
// family the page lists with a call, an ordered call, a staged payload and
// a stream over the mux, except the families that only faults, overload
// or backpressure move. The snippet used to set only the transport's
// observability, which left the messenger, streaming, mux and rendezvous
// families empty.
func TestMetricsSnippetFillsEveryFamily(t *testing.T) {
	page, fams := docFamilies(t)
	snippet := page[strings.Index(page, "```go"):]
	snippet = snippet[:strings.Index(snippet[3:], "```")+3]
	for _, want := range []string{"metrics.Register(reg)", "velo.New(ctx, velo.WithTransport(tr), velo.WithMetrics(vm))", "promhttp.HandlerFor(reg"} {
		if !strings.Contains(snippet, want) {
			t.Fatalf("the snippet of docs/metrics.md has no %s; this test wires nodes as it did:\n%s", want, snippet)
		}
	}
	sreg, svm := registered(t)
	creg, cvm := registered(t)
	server := node(t, velo.WithMetrics(svm))
	client := node(t, velo.WithMetrics(cvm), velo.WithStagingThreshold(1024))
	echo := func(c *velo.Context) ([]byte, error) { return c.Payload[:1], nil }
	for _, h := range []velo.Handler{velo.UnaryHandler("echo", echo), velo.UnaryHandler("ordered", echo, velo.WithOrdered())} {
		if err := server.Register(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range [][]byte{[]byte("x"), make([]byte, 4096)} { // the second is staged
		for _, h := range []string{"echo", "ordered"} {
			if _, err := client.Unary(ctx, server.InstanceID(), h, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	anchor, err := streaming.CreateAnchor[[]byte](server.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer anchor.Close()
	s, err := streaming.AttachAnchor[[]byte](ctx, client.Streams, anchor.Handle())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := s.Send(ctx, []byte("token")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	for _, err := range anchor.All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
	}
	filled := map[string]bool{}
	moved(t, sreg, filled)
	moved(t, creg, filled)
	if len(fams) < 40 {
		t.Fatalf("%d families read from docs/metrics.md; the reading is broken", len(fams))
	}
	for _, f := range fams {
		if _, quiet := quietFamilies[f]; !quiet && !filled[f] {
			t.Errorf("%s: nothing recorded into it", f)
		}
	}
	for f := range quietFamilies {
		if !slices.Contains(fams, f) {
			t.Errorf("quietFamilies names %s, which docs/metrics.md does not list", f)
		}
	}
}
