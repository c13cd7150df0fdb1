package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Series bound on first use. A family whose label sets are many and mostly
// never met (operations × outcomes × schemes) binds one set the first time
// it records into it, and keeps the handles in an atomic pointer: a record
// after that loads the pointer and adds, with no label hashing, no map
// lookup and no allocation. The caller loads the pointer itself and calls
// a bind function only when it is nil, so that the label strings are built
// on the first record only. Two goroutines that bind one set at once get
// the same children from the vector, so whichever store lands is right.

// opSeries is the counter and the duration histogram of one label set.
type opSeries struct {
	count prometheus.Counter
	dur   prometheus.Observer
}

// observerSeries is one histogram child.
type observerSeries struct{ obs prometheus.Observer }

// counterSeries is one counter child.
type counterSeries struct{ c prometheus.Counter }

func bindOp(p *atomic.Pointer[opSeries], cv *prometheus.CounterVec, hv *prometheus.HistogramVec, labels ...string) *opSeries {
	s := &opSeries{count: cv.WithLabelValues(labels...), dur: hv.WithLabelValues(labels...)}
	p.Store(s)
	return s
}

func bindObserver(p *atomic.Pointer[observerSeries], hv *prometheus.HistogramVec, labels ...string) *observerSeries {
	s := &observerSeries{hv.WithLabelValues(labels...)}
	p.Store(s)
	return s
}

func bindCounter(p *atomic.Pointer[counterSeries], cv *prometheus.CounterVec, labels ...string) *counterSeries {
	s := &counterSeries{cv.WithLabelValues(labels...)}
	p.Store(s)
	return s
}
