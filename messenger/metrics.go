package messenger

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/metrics"
)

var outcomes = [2]string{"success", "error"}

// handlerMetrics are the series of one handler, or of all of velo's own
// handlers together (SystemHandlerLabel). Nothing is bound when the handler
// is registered: a node has some forty system handlers, most of which never
// run, and a histogram per handler, response type and outcome is what made
// an idle node's scrape a megabyte. Each group of series is bound the first
// time it is needed and its handle kept in an atomic pointer, so every later
// request loads a pointer and adds, with no label hashing, no map lookup and
// no allocation. Two goroutines that bind the same group at once get the
// same children from the vectors, so either store is right.
type handlerMetrics struct {
	vm   *metrics.VeloMetrics
	name string

	calls    [msgwire.UnaryResponse + 1][2]atomic.Pointer[callSeries] // response type, outcome
	inFlight atomic.Pointer[inFlightSeries]
	lanes    atomic.Pointer[laneSeries]
	waits    atomic.Pointer[prometheus.Counter] // velo_messenger_spawn_queue_waits_total
}

// callSeries are the series of one response type and outcome.
type callSeries struct {
	requests  prometheus.Counter
	duration  prometheus.Observer
	reqBytes  prometheus.Counter // has no outcome label: shared by both outcomes
	respBytes prometheus.Counter
}

type inFlightSeries struct{ g prometheus.Gauge }

// laneSeries are the ordered-lane series; only an ordered handler that made
// a lane binds them.
type laneSeries struct {
	lanes     prometheus.Gauge
	depth     prometheus.Gauge
	wait      prometheus.Observer
	created   prometheus.Counter
	overDepth prometheus.Counter
}

func newHandlerMetrics(vm *metrics.VeloMetrics, name string) *handlerMetrics {
	return &handlerMetrics{vm: vm, name: name}
}

// handlerMetricsFor gives a handler being registered its series: its own,
// or the ones velo's handlers share. Called under regMu (register), which
// also guards the shared one's creation.
func (m *Messenger) handlerMetricsFor(name string, system bool) *handlerMetrics {
	if m.met == nil {
		return nil
	}
	if !system || m.sysSeries {
		return newHandlerMetrics(m.met, name)
	}
	if m.sysMet == nil {
		m.sysMet = newHandlerMetrics(m.met, msgwire.SystemHandlerLabel)
	}
	return m.sysMet
}

// running is the in-flight gauge, bound on first use.
func (m *handlerMetrics) running() prometheus.Gauge {
	if s := m.inFlight.Load(); s != nil {
		return s.g
	}
	s := &inFlightSeries{m.vm.HandlerInFlight.WithLabelValues(m.name)}
	m.inFlight.Store(s)
	return s.g
}

// spawnWaits is the spawn queue's wait counter, bound on first use.
func (m *handlerMetrics) spawnWaits() prometheus.Counter {
	if c := m.waits.Load(); c != nil {
		return *c
	}
	c := m.vm.SpawnQueueWaits.WithLabelValues(m.name)
	m.waits.Store(&c)
	return c
}

// lane is the ordered-lane series, bound on first use.
func (m *handlerMetrics) lane() *laneSeries {
	if s := m.lanes.Load(); s != nil {
		return s
	}
	hm := m.vm.Handler(m.name)
	s := &laneSeries{
		lanes: hm.OrderedLanes, depth: hm.OrderedLaneDepth, wait: hm.OrderedLaneWait,
		created: hm.OrderedLanesCreated, overDepth: hm.OrderedLaneOverDepth,
	}
	m.lanes.Store(s)
	return s
}

// call is the series of one response type and outcome, bound on first use.
func (m *handlerMetrics) call(rt msgwire.ResponseType, o int) *callSeries {
	if s := m.calls[rt][o].Load(); s != nil {
		return s
	}
	return m.bindCall(rt, o)
}

func (m *handlerMetrics) bindCall(rt msgwire.ResponseType, o int) *callSeries {
	s := &callSeries{
		requests:  m.vm.HandlerRequests.WithLabelValues(m.name, rt.String(), outcomes[o]),
		duration:  m.vm.HandlerDuration.WithLabelValues(m.name, rt.String(), outcomes[o]),
		reqBytes:  m.vm.HandlerRequestBytes.WithLabelValues(m.name, rt.String()),
		respBytes: m.vm.HandlerResponseBytes.WithLabelValues(m.name, rt.String(), outcomes[o]),
	}
	m.calls[rt][o].Store(s)
	return s
}

// observe records a handler run that ended, and takes it off the in-flight gauge.
func (m *handlerMetrics) observe(rt msgwire.ResponseType, err error, d time.Duration, in, out int) {
	o := 0
	if err != nil {
		o = 1
	}
	m.running().Dec()
	s := m.call(rt, o)
	s.requests.Inc()
	s.duration.Observe(d.Seconds())
	s.reqBytes.Add(float64(in))
	s.respBytes.Add(float64(out))
}

// countFailure counts a dispatch or response-path failure.
func (m *Messenger) countFailure(stage, reason string) {
	if m.met != nil {
		m.met.DispatchFailures.WithLabelValues(stage, reason).Inc()
	}
}
