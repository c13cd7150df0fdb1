package messenger

import (
	"time"

	"github.com/velo-go/velo/metrics"
)

var outcomes = [2]string{"success", "error"}

func newHandlerMetrics(vm *metrics.VeloMetrics, name string) *handlerMetrics {
	hm := vm.Handler(name)
	m := &handlerMetrics{
		inFlight: hm.InFlight, lanes: hm.OrderedLanes, depth: hm.OrderedLaneDepth,
		wait: hm.OrderedLaneWait, lanesCreated: hm.OrderedLanesCreated,
		overDepth: hm.OrderedLaneOverDepth,
	}
	for rt := FireAndForget; rt <= UnaryResponse; rt++ {
		m.reqBytes[rt] = vm.HandlerRequestBytes.WithLabelValues(name, rt.String())
		for o, out := range outcomes {
			m.requests[rt][o] = vm.HandlerRequests.WithLabelValues(name, rt.String(), out)
			m.durations[rt][o] = vm.HandlerDuration.WithLabelValues(name, rt.String(), out)
			m.respBytes[rt][o] = vm.HandlerResponseBytes.WithLabelValues(name, rt.String(), out)
		}
	}
	return m
}

func (m *handlerMetrics) observe(rt ResponseType, err error, d time.Duration, in, out int) {
	o := 0
	if err != nil {
		o = 1
	}
	m.requests[rt][o].Inc()
	m.durations[rt][o].Observe(d.Seconds())
	m.reqBytes[rt].Add(float64(in))
	m.respBytes[rt][o].Add(float64(out))
}

// countFailure counts a dispatch or response-path failure.
func (m *Messenger) countFailure(stage, reason string) {
	if m.met != nil {
		m.met.DispatchFailures.WithLabelValues(stage, reason).Inc()
	}
}
