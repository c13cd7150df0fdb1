package metrics

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// latencyBuckets spans 1µs to 10s in 15 steps of √10. Frame waits and
// writes sit in the microseconds, handlers can run for seconds; one bucket
// layout for both keeps dashboards comparable.
var latencyBuckets = prometheus.ExponentialBucketsRange(1e-6, 10, 15)

// VeloMetrics holds every family velo registers. Build it with Register.
//
// The transport families are reached through Transport, which pre-binds
// them. The messenger families are exported so that the messenger can bind
// the label values it meets, each on first use (see Handler), and so that
// a test can read a series.
type VeloMetrics struct {
	// Transport family; see Transport.
	frames         *prometheus.CounterVec
	frameBytes     *prometheus.CounterVec
	framesWritten  *prometheus.CounterVec
	egressWait     *prometheus.HistogramVec
	writeDuration  *prometheus.HistogramVec
	rejections     *prometheus.CounterVec
	sendBackpress  *prometheus.CounterVec
	registeredPeer *prometheus.GaugeVec
	activeConns    *prometheus.GaugeVec
	connsDropped   *prometheus.CounterVec
	acceptErrors   *prometheus.CounterVec

	// Messenger family.
	HandlerRequests       *prometheus.CounterVec   // handler, response_type, outcome
	HandlerDuration       *prometheus.HistogramVec // handler, response_type, outcome
	HandlerRequestBytes   *prometheus.CounterVec   // handler, response_type
	HandlerResponseBytes  *prometheus.CounterVec   // handler, response_type, outcome
	HandlerInFlight       *prometheus.GaugeVec     // handler
	OrderedLanes          *prometheus.GaugeVec     // handler
	OrderedLaneDepth      *prometheus.GaugeVec     // handler
	OrderedLaneWait       *prometheus.HistogramVec // handler
	OrderedLanesCreated   *prometheus.CounterVec   // handler
	OrderedLaneOverDepth  *prometheus.CounterVec   // handler
	SpawnQueueWaits       *prometheus.CounterVec   // handler
	DispatchFailures      *prometheus.CounterVec   // stage, reason
	ClientResolution      *prometheus.CounterVec   // path, outcome
	PendingResponses      prometheus.Gauge
	ResponseSlotExhausted prometheus.Counter
	InboundDequeued       prometheus.Counter

	// Streaming family; see Streaming.
	streamOps        *prometheus.CounterVec   // operation, outcome, transport_scheme
	streamOpDur      *prometheus.HistogramVec // operation, outcome, transport_scheme
	streamAttachRTT  *prometheus.HistogramVec // outcome, transport_scheme
	streamBP         *prometheus.CounterVec   // transport_scheme
	streamProducerBP prometheus.Counter
	streamReaderBP   prometheus.Counter
	streamServerBP   prometheus.Counter // registered, never moved: see docs/metrics.md
	streamFrames     prometheus.Counter
	muxPerBatch      *prometheus.HistogramVec // direction
	muxCollector     *muxCollector
	streamFlushes    prometheus.Counter
	streamWatchdog   prometheus.Counter
	streamCreated    *prometheus.CounterVec // kind (ours, not the book's)
	streamUnattached prometheus.Counter     // ours, not the book's
	streamActive     *activeAnchors
	streamOnce       sync.Once
	stream           *StreamingMetrics

	// Rendezvous family; see Rendezvous.
	rvOps     *prometheus.CounterVec   // operation, outcome
	rvDur     *prometheus.HistogramVec // operation, outcome
	rvBytes   *prometheus.CounterVec   // operation
	rvRefused *prometheus.CounterVec   // operation, reason (ours, not the book's)
	rvActive  prometheus.Gauge
	rvOnce    sync.Once
	rv        *RendezvousMetrics
	rdma      rdmaFamilies // see rdma.go
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func histVec(name, help string, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: latencyBuckets,
	}, labels)
}

// Register creates every family and registers it into reg. It returns an
// error, and leaves reg as it found it, if any family is already there
// (for example when Register is called twice on one registry).
func Register(reg *prometheus.Registry) (*VeloMetrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("metrics: nil registry")
	}
	m := &VeloMetrics{
		frames: counterVec("velo_transport_frames_total",
			"Frames seen by a velo transport.",
			"transport", "direction", "message_type", "outcome"),
		frameBytes: counterVec("velo_transport_frame_bytes_total",
			"Logical frame bytes (header plus payload) seen by a velo transport.",
			"transport", "direction", "message_type"),
		framesWritten: counterVec("velo_transport_frames_written_total",
			"Frames a connection writer handed to its send buffer, counted after the write returned.",
			"transport", "message_type"),
		egressWait: histVec("velo_transport_egress_queue_wait_seconds",
			"Time an outbound frame waited from the send attempt until its writer dequeued it.",
			"transport"),
		writeDuration: histVec("velo_transport_write_duration_seconds",
			"Wall time of one write by a connection writer; one write may carry many frames.",
			"transport"),
		rejections: counterVec("velo_transport_rejections_total",
			"Frames a velo transport rejected or dropped, by reason.",
			"transport", "reason"),
		sendBackpress: counterVec("velo_transport_send_backpressure_total",
			"Sends that found the target's bounded channel full and waited in its admission gate.",
			"transport"),
		registeredPeer: gaugeVec("velo_transport_registered_peers",
			"Peers registered with a velo transport.", "transport"),
		activeConns: gaugeVec("velo_transport_active_connections",
			"Open connections of a velo transport.", "transport"),
		connsDropped: counterVec("velo_transport_connections_dropped_total",
			"Inbound connections a velo transport closed on its own, by reason.",
			"transport", "reason"),
		acceptErrors: counterVec("velo_transport_accept_errors_total",
			"Failed accepts of a velo transport's listening socket.", "transport"),

		HandlerRequests: counterVec("velo_messenger_handler_requests_total",
			"Requests seen by messenger handlers.", "handler", "response_type", "outcome"),
		HandlerDuration: histVec("velo_messenger_handler_duration_seconds",
			"Time a messenger handler ran.", "handler", "response_type", "outcome"),
		HandlerRequestBytes: counterVec("velo_messenger_handler_request_bytes_total",
			"Request payload bytes given to messenger handlers.", "handler", "response_type"),
		HandlerResponseBytes: counterVec("velo_messenger_handler_response_bytes_total",
			"Response payload bytes returned by messenger handlers.", "handler", "response_type", "outcome"),
		HandlerInFlight: gaugeVec("velo_messenger_handler_in_flight",
			"Messenger handlers running now.", "handler"),
		OrderedLanes: gaugeVec("velo_messenger_ordered_lanes",
			"Live ordering lanes of ordered-dispatch handlers.", "handler"),
		OrderedLaneDepth: gaugeVec("velo_messenger_ordered_lane_depth",
			"Messages queued on ordering lanes and not yet handled.", "handler"),
		OrderedLaneWait: histVec("velo_messenger_ordered_lane_wait_seconds",
			"Time a message waited on its ordering lane before the handler started.", "handler"),
		OrderedLanesCreated: counterVec("velo_messenger_ordered_lanes_created_total",
			"Ordering lanes created; minus the live lane gauge, this gives lanes reaped.", "handler"),
		OrderedLaneOverDepth: counterVec("velo_messenger_ordered_lane_over_depth_total",
			"Messages queued on an ordering lane that already held its max queue depth (overflow policy Warn).", "handler"),
		SpawnQueueWaits: counterVec("velo_messenger_spawn_queue_waits_total",
			"Times a connection's reader stopped reading until a spawn-mode handler's queue, which it took over its bound, went down to half.", "handler"),
		DispatchFailures: counterVec("velo_messenger_dispatch_failures_total",
			"Failures on the messenger dispatch and response paths.", "stage", "reason"),
		ClientResolution: counterVec("velo_messenger_client_resolution_total",
			"Outcomes of messenger client routing, by path.", "path", "outcome"),
		PendingResponses: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "velo_messenger_pending_responses",
			Help: "Messenger calls waiting for a response.",
		}),
		ResponseSlotExhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_messenger_response_slot_exhausted_total",
			Help: "Response slot requests that hit the per-worker capacity limit.",
		}),
		InboundDequeued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_messenger_inbound_dequeued_total",
			Help: "Messages the dispatch loop took off the messenger inbound queue.",
		}),

		streamOps: counterVec("velo_streaming_anchor_operations_total",
			"Streaming control-plane operations observed by Velo.",
			"operation", "outcome", "transport_scheme"),
		streamOpDur: histVec("velo_streaming_anchor_operation_duration_seconds",
			"Streaming control-plane operation duration.",
			"operation", "outcome", "transport_scheme"),
		streamAttachRTT: histVec("velo_streaming_anchor_attach_rtt_seconds",
			"Wall time a remote anchor attach spent in flight, measured by the sender across the round trip to the owner's attach handler.",
			"outcome", "transport_scheme"),
		streamBP: counterVec("velo_streaming_backpressure_total",
			"Streaming backpressure events observed by Velo.", "transport_scheme"),
		streamProducerBP: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_streaming_producer_send_backpressure_total",
			Help: "Stream sends that found the anchor inlet or the sender's egress queue full and waited for room.",
		}),
		streamReaderBP: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_streaming_reader_pump_backpressure_total",
			Help: "Frames the reader of a per-stream connection found no room for in the anchor's inlet, and waited.",
		}),
		streamServerBP: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_streaming_server_pump_backpressure_total",
			Help: "Always zero here: the reader of a per-stream connection feeds the anchor's inlet directly, with no bind-side channel between them.",
		}),
		streamFrames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_streaming_frames_written_total",
			Help: "Stream frames (items, heartbeats, terminals) the per-stream egress pump wrote to its connection.",
		}),
		streamFlushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_streaming_egress_flushes_total",
			Help: "Batches the per-stream egress pump handed to its connection in one write that succeeded.",
		}),
		streamWatchdog: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_streaming_heartbeat_watchdog_firings_total",
			Help: "Heartbeat-watchdog firings: a stream went DetectionMultiplier heartbeat intervals with no frame and was ended with a Dropped sentinel.",
		}),
		streamCreated: counterVec("velo_streaming_anchors_created_total",
			"Anchors created, by kind (spsc, mpsc).", "kind"),
		streamUnattached: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_streaming_unattached_timeouts_total",
			Help: "Anchors ended because no producer attached within their unattached timeout.",
		}),
		streamActive: newActiveAnchors(),
		muxPerBatch:  newMuxPerBatch(),
		muxCollector: newMuxCollector(),

		rvOps: counterVec("velo_rendezvous_operations_total",
			"Rendezvous operations observed by Velo.", "operation", "outcome"),
		rvDur: histVec("velo_rendezvous_operation_duration_seconds",
			"Duration of rendezvous operations.", "operation", "outcome"),
		rvBytes: counterVec("velo_rendezvous_bytes_total",
			"Total bytes transferred via rendezvous.", "operation"),
		rvRefused: counterVec("velo_rendezvous_refusals_total",
			"Rendezvous requests and answers refused, by operation and reason.", "operation", "reason"),
		rvActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "velo_rendezvous_active_slots",
			Help: "Number of data slots currently staged in the rendezvous registry.",
		}),
		rdma: newRdmaFamilies(),
	}
	all := m.collectors()
	for i, c := range all {
		if err := reg.Register(c); err != nil {
			// Undo the partial work so the caller can retry or use reg as
			// it was, instead of holding half a set of families.
			for _, done := range all[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("metrics: register velo families: %w", err)
		}
	}
	return m, nil
}

// collectors are every family of m, in the order Register registers them.
func (m *VeloMetrics) collectors() []prometheus.Collector {
	return append([]prometheus.Collector{
		m.frames, m.frameBytes, m.framesWritten, m.egressWait, m.writeDuration,
		m.rejections, m.sendBackpress, m.registeredPeer, m.activeConns,
		m.connsDropped, m.acceptErrors,
		m.HandlerRequests, m.HandlerDuration, m.HandlerRequestBytes, m.HandlerResponseBytes,
		m.HandlerInFlight, m.OrderedLanes, m.OrderedLaneDepth, m.OrderedLaneWait,
		m.OrderedLanesCreated, m.OrderedLaneOverDepth, m.SpawnQueueWaits, m.DispatchFailures, m.ClientResolution,
		m.PendingResponses, m.ResponseSlotExhausted, m.InboundDequeued,
		m.streamOps, m.streamOpDur, m.streamAttachRTT, m.streamBP, m.streamProducerBP,
		m.streamReaderBP, m.streamServerBP, m.streamFrames, m.streamFlushes, m.streamWatchdog,
		m.streamCreated, m.streamUnattached, m.streamActive,
		m.muxPerBatch, m.muxCollector,
		m.rvOps, m.rvDur, m.rvBytes, m.rvRefused, m.rvActive,
	}, m.rdma.collectors()...)
}

// HandlerMetrics holds the messenger series that carry only the handler
// label, bound to one handler name.
type HandlerMetrics struct {
	InFlight             prometheus.Gauge
	OrderedLanes         prometheus.Gauge
	OrderedLaneDepth     prometheus.Gauge
	OrderedLaneWait      prometheus.Observer
	OrderedLanesCreated  prometheus.Counter
	OrderedLaneOverDepth prometheus.Counter
}

// Handler binds the handler-only messenger series to name, making them if
// they are not there yet. The messenger calls it when an ordered handler
// makes its first lane and keeps the result. m must not be nil.
func (m *VeloMetrics) Handler(name string) HandlerMetrics {
	return HandlerMetrics{
		InFlight:             m.HandlerInFlight.WithLabelValues(name),
		OrderedLanes:         m.OrderedLanes.WithLabelValues(name),
		OrderedLaneDepth:     m.OrderedLaneDepth.WithLabelValues(name),
		OrderedLaneWait:      m.OrderedLaneWait.WithLabelValues(name),
		OrderedLanesCreated:  m.OrderedLanesCreated.WithLabelValues(name),
		OrderedLaneOverDepth: m.OrderedLaneOverDepth.WithLabelValues(name),
	}
}
