package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StreamOp is the operation label of velo_streaming_anchor_operations_total
// and velo_streaming_anchor_operation_duration_seconds.
type StreamOp uint8

const (
	StreamCreate   StreamOp = iota // an anchor made (SPSC or MPSC)
	StreamAttach                   // a producer attached (the owner's side of a remote attach too)
	StreamDetach                   // a producer detached
	StreamFinalize                 // a producer finalized
	StreamCancel                   // the consumer cancelled or closed a live stream
	StreamRenew                    // one handle of RenewReservations
	StreamPrebind                  // a consumer pre-bound a mux slot for a zero-RTT ticket
	NumStreamOps
)

var streamOpNames = [NumStreamOps]string{"create", "attach", "detach", "finalize", "cancel", "renew", "prebind"}

func (o StreamOp) String() string {
	if o < NumStreamOps {
		return streamOpNames[o]
	}
	return "unknown"
}

// StreamScheme is the transport_scheme label of the streaming families:
// where an operation ran, and for a stream between two workers the key of
// the transport that carries it.
type StreamScheme uint8

const (
	// SchemeLocal: the operation stayed on this worker (same-worker
	// streams, and operations of the Manager such as create and renew).
	SchemeLocal StreamScheme = iota
	// SchemeTCPStream: a stream to or from another worker over one TCP
	// connection per stream ("tcp-stream").
	SchemeTCPStream
	// SchemeUnknown: a remote operation that failed before a transport
	// was agreed.
	SchemeUnknown
	// SchemeMux: a stream to or from another worker over the messenger
	// mux ("messenger-mux-v2").
	SchemeMux
	// SchemeTLSStream: one TLS connection per stream ("tls-stream").
	SchemeTLSStream
	// SchemeGRPCStream: one gRPC call per stream ("grpc-stream").
	SchemeGRPCStream
	// schemePlugins is the first of MaxPluginSchemes schemes named by
	// the keys of frame transports from outside velo (FrameScheme).
	schemePlugins
	NumStreamSchemes = schemePlugins + MaxPluginSchemes
)

// MaxPluginSchemes bounds how many keys of frame transports from outside
// velo one StreamingMetrics labels by name; a key past them counts as
// "unknown". A node has one frame transport, so one is the usual count.
const MaxPluginSchemes = 4

var streamSchemeNames = [schemePlugins]string{"local", "tcp-stream", "unknown", "messenger-mux-v2", "tls-stream", "grpc-stream"}

// String is the label of a built-in scheme. A plugin's scheme has the
// label its StreamingMetrics gave it (FrameScheme); String says "plugin".
func (s StreamScheme) String() string {
	switch {
	case s < schemePlugins:
		return streamSchemeNames[s]
	case s < NumStreamSchemes:
		return "plugin"
	}
	return "unknown"
}

// SchemeOf maps the key of a built-in stream transport to its scheme, and
// any other key to SchemeUnknown (FrameScheme names a plugin's).
func SchemeOf(key string) StreamScheme {
	for i, n := range streamSchemeNames {
		if n == key && StreamScheme(i) != SchemeLocal && StreamScheme(i) != SchemeUnknown {
			return StreamScheme(i)
		}
	}
	return SchemeUnknown
}

// FrameScheme is the scheme of a node's frame transport of that key: a
// built-in one (SchemeOf), or, for a frame transport from outside velo, a
// scheme whose label is the key, made on first call, up to
// MaxPluginSchemes keys (then SchemeUnknown). Call it with the key of a
// transport this node runs, not with a key a peer sent: each new key is a
// label set kept for the registry's life. On a nil receiver it is
// SchemeOf(key).
func (s *StreamingMetrics) FrameScheme(key string) StreamScheme {
	if sc := SchemeOf(key); sc != SchemeUnknown || s == nil || key == "" || key == "local" || key == "unknown" {
		return sc
	}
	s.pluginMu.Lock()
	defer s.pluginMu.Unlock()
	for i := range s.plugins {
		p := s.plugins[i].Load()
		if p == nil {
			s.plugins[i].Store(&key)
			sc := schemePlugins + StreamScheme(i)
			s.backpressure[sc] = s.bpVec.WithLabelValues(key)
			return sc
		}
		if *p == key {
			return schemePlugins + StreamScheme(i)
		}
	}
	return SchemeUnknown
}

// label is the transport_scheme value of sc.
func (s *StreamingMetrics) label(sc StreamScheme) string {
	if sc >= schemePlugins && sc < NumStreamSchemes {
		if p := s.plugins[sc-schemePlugins].Load(); p != nil {
			return *p
		}
		return "unknown"
	}
	return sc.String()
}

const (
	outcomeSuccess = 0
	outcomeError   = 1
)

var streamOutcomeNames = [2]string{"success", "error"}

// StreamingMetrics is the handle of the Streaming family, from
// VeloMetrics.Streaming. The series without labels, the kinds of
// anchors_created_total and the built-in schemes of backpressure_total
// exist, at zero, once it is built (a plugin's scheme once FrameScheme
// made it). The operation and attach families are bound on first use, one
// label set at a time: of their 7 × 2 × 10 combinations a
// node meets a handful, and pre-binding them all made an idle node scrape
// over a thousand histogram samples. A bound label set is kept in an
// atomic pointer, so a record after the first is a load, an index and an
// atomic add. The streaming package holds a *StreamingMetrics and records
// nothing when it is nil.
type StreamingMetrics struct {
	ops          [NumStreamOps][2][NumStreamSchemes]atomic.Pointer[opSeries]
	attachRTT    [2][NumStreamSchemes]atomic.Pointer[observerSeries]
	opsVec       *prometheus.CounterVec
	durVec       *prometheus.HistogramVec
	rttVec       *prometheus.HistogramVec
	bpVec        *prometheus.CounterVec
	created      [2]prometheus.Counter                // spsc, mpsc
	backpressure [NumStreamSchemes]prometheus.Counter // nil for a plugin slot not taken
	producerBP   prometheus.Counter
	readerBP     prometheus.Counter
	frames       prometheus.Counter
	flushes      prometheus.Counter
	watchdog     prometheus.Counter
	unattached   prometheus.Counter
	active       *activeAnchors

	pluginMu sync.Mutex                               // FrameScheme's allocation
	plugins  [MaxPluginSchemes]atomic.Pointer[string] // the keys of the plugin schemes
}

// Streaming returns the handle of the Streaming family. Every call on one
// VeloMetrics returns the same handle. On a nil *VeloMetrics it returns
// nil, which the streaming package takes as "no metrics".
func (m *VeloMetrics) Streaming() *StreamingMetrics {
	if m == nil {
		return nil
	}
	m.streamOnce.Do(func() {
		s := &StreamingMetrics{
			opsVec:     m.streamOps,
			durVec:     m.streamOpDur,
			rttVec:     m.streamAttachRTT,
			bpVec:      m.streamBP,
			producerBP: m.streamProducerBP,
			readerBP:   m.streamReaderBP,
			frames:     m.streamFrames,
			flushes:    m.streamFlushes,
			watchdog:   m.streamWatchdog,
			unattached: m.streamUnattached,
			active:     m.streamActive,
		}
		s.created[0] = m.streamCreated.WithLabelValues("spsc")
		s.created[1] = m.streamCreated.WithLabelValues("mpsc")
		for sc := range schemePlugins {
			s.backpressure[sc] = m.streamBP.WithLabelValues(sc.String())
		}
		m.stream = s
	})
	return m.stream
}

func outcomeIndex(ok bool) int {
	if ok {
		return outcomeSuccess
	}
	return outcomeError
}

// Operation counts one operation and observes its duration.
func (s *StreamingMetrics) Operation(op StreamOp, sc StreamScheme, ok bool, d time.Duration) {
	if op >= NumStreamOps || sc >= NumStreamSchemes {
		return
	}
	oc := outcomeIndex(ok)
	o := s.ops[op][oc][sc].Load()
	if o == nil {
		o = bindOp(&s.ops[op][oc][sc], s.opsVec, s.durVec, op.String(), streamOutcomeNames[oc], s.label(sc))
	}
	o.count.Inc()
	o.dur.Observe(d.Seconds())
}

// AttachRTT observes the round trip of a remote attach, measured by the
// producer's node.
func (s *StreamingMetrics) AttachRTT(sc StreamScheme, ok bool, d time.Duration) {
	if sc >= NumStreamSchemes {
		return
	}
	oc := outcomeIndex(ok)
	o := s.attachRTT[oc][sc].Load()
	if o == nil {
		o = bindObserver(&s.attachRTT[oc][sc], s.rttVec, streamOutcomeNames[oc], s.label(sc))
	}
	o.obs.Observe(d.Seconds())
}

// AnchorCreated counts an anchor made, by kind.
func (s *StreamingMetrics) AnchorCreated(mpsc bool) {
	if mpsc {
		s.created[1].Inc()
	} else {
		s.created[0].Inc()
	}
}

// ProducerBackpressure counts a send that found the inlet (or the remote
// sender's egress queue) full and had to wait for room: once per send,
// however long it waited.
func (s *StreamingMetrics) ProducerBackpressure(sc StreamScheme) {
	s.producerBP.Inc()
	if sc < NumStreamSchemes && s.backpressure[sc] != nil {
		s.backpressure[sc].Inc()
	}
}

// ReaderPumpBackpressure counts a frame that the reader of a per-stream
// connection found no room for in the anchor's inlet: once per frame,
// however long it waited. It is the consumer's node that counts it.
func (s *StreamingMetrics) ReaderPumpBackpressure() { s.readerBP.Inc() }

// EgressFlushed counts one write of the per-stream egress pump that
// carried frames stream frames. Call it only once the write succeeded, so
// that the counters describe what reached the socket.
func (s *StreamingMetrics) EgressFlushed(frames int) {
	s.frames.Add(float64(frames))
	s.flushes.Inc()
}

// WatchdogFiring counts a stream ended by the heartbeat watchdog.
func (s *StreamingMetrics) WatchdogFiring() { s.watchdog.Inc() }

// UnattachedTimeout counts an anchor ended by its unattached timeout.
func (s *StreamingMetrics) UnattachedTimeout() { s.unattached.Inc() }

// TrackActive adds fn to the sources of velo_streaming_active_anchors,
// which sums them at scrape time. Call the returned function, once or
// more, to remove it (when the Manager closes).
func (s *StreamingMetrics) TrackActive(fn func() int) (untrack func()) {
	return s.active.add(fn)
}

// activeAnchors is the collector of velo_streaming_active_anchors: it reads
// the registries of the Managers that report into it when scraped, so that
// nothing is counted per create or remove.
type activeAnchors struct {
	desc *prometheus.Desc

	mu      sync.Mutex
	next    uint64
	sources map[uint64]func() int
}

func newActiveAnchors() *activeAnchors {
	return &activeAnchors{
		desc: prometheus.NewDesc("velo_streaming_active_anchors",
			"Anchors currently present in the streaming registry.", nil, nil),
		sources: make(map[uint64]func() int),
	}
}

func (a *activeAnchors) add(fn func() int) func() {
	a.mu.Lock()
	a.next++
	id := a.next
	a.sources[id] = fn
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		delete(a.sources, id)
		a.mu.Unlock()
	}
}

func (a *activeAnchors) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a *activeAnchors) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	fns := make([]func() int, 0, len(a.sources))
	for _, fn := range a.sources {
		fns = append(fns, fn)
	}
	a.mu.Unlock()
	n := 0
	for _, fn := range fns { // outside the lock: a source takes its own locks
		n += fn()
	}
	ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, float64(n))
}
