package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/ext"
)

// ext has no count constants for these two, and each has exactly two values.
const (
	numDirections = 2 // ext.Inbound, ext.Outbound
	numOutcomes   = 2 // ext.Accepted, ext.Rejected
)

var (
	_ ext.Observability           = (*transportObs)(nil)
	_ ext.ConnectionObservability = (*transportObs)(nil)
)

// transportObs is the per-transport handle. Every series is bound when it
// is built, so a record is an array index and an atomic add: no label
// hashing, no map lookup, no allocation on the frame path.
type transportObs struct {
	frames        [numDirections][ext.NumMessageTypes][numOutcomes]prometheus.Counter
	frameBytes    [numDirections][ext.NumMessageTypes]prometheus.Counter
	framesWritten [ext.NumMessageTypes]prometheus.Counter
	rejections    [ext.NumRejectionReasons]prometheus.Counter
	dropped       [ext.NumConnectionDrops]prometheus.Counter
	acceptErrors  prometheus.Counter
	backpressure  prometheus.Counter
	peers         prometheus.Gauge
	conns         prometheus.Gauge
	egressWait    prometheus.Observer
	writeDuration prometheus.Observer
}

// Transport returns the handle a transport built with key records into.
// All of its series exist, at zero, once this returns, so dashboards see
// every direction, type, outcome and reason before traffic does. Calling
// it twice with one key gives handles that share the same series.
//
// On a nil *VeloMetrics it returns ext.NopObservability.
func (m *VeloMetrics) Transport(key ext.TransportKey) ext.Observability {
	if m == nil {
		return ext.NopObservability{}
	}
	tr := string(key)
	o := &transportObs{
		backpressure:  m.sendBackpress.WithLabelValues(tr),
		peers:         m.registeredPeer.WithLabelValues(tr),
		conns:         m.activeConns.WithLabelValues(tr),
		egressWait:    m.egressWait.WithLabelValues(tr),
		writeDuration: m.writeDuration.WithLabelValues(tr),
		acceptErrors:  m.acceptErrors.WithLabelValues(tr),
	}
	for t := range ext.NumMessageTypes {
		mt := ext.MessageType(t).String()
		o.framesWritten[t] = m.framesWritten.WithLabelValues(tr, mt)
		for d := range numDirections {
			dir := ext.Direction(d).String()
			o.frameBytes[d][t] = m.frameBytes.WithLabelValues(tr, dir, mt)
			for oc := range numOutcomes {
				out := ext.FrameOutcome(oc).String()
				o.frames[d][t][oc] = m.frames.WithLabelValues(tr, dir, mt, out)
			}
		}
	}
	for r := range ext.NumRejectionReasons {
		o.rejections[r] = m.rejections.WithLabelValues(tr, ext.RejectionReason(r).String())
	}
	for d := range ext.NumConnectionDrops {
		o.dropped[d] = m.connsDropped.WithLabelValues(tr, ext.ConnectionDrop(d).String())
	}
	return o
}

// Frames counts frames and their bytes. Values outside the defined enums
// are dropped rather than allowed to panic the transport on an index.
// Bytes count for every outcome, since the bytes family has no outcome label.
func (o *transportObs) Frames(dir ext.Direction, t ext.MessageType, outcome ext.FrameOutcome, frames, bytes int) {
	if int(dir) >= numDirections || int(t) >= ext.NumMessageTypes || int(outcome) >= numOutcomes || frames <= 0 {
		return
	}
	o.frames[dir][t][outcome].Add(float64(frames))
	if bytes > 0 { // Counter.Add panics on a negative value
		o.frameBytes[dir][t].Add(float64(bytes))
	}
}

func (o *transportObs) Rejection(reason ext.RejectionReason) {
	if int(reason) < ext.NumRejectionReasons {
		o.rejections[reason].Inc()
	}
}

func (o *transportObs) ConnectionDropped(reason ext.ConnectionDrop) {
	if int(reason) < ext.NumConnectionDrops {
		o.dropped[reason].Inc()
	}
}

func (o *transportObs) AcceptError() { o.acceptErrors.Inc() }

func (o *transportObs) SendBackpressure() { o.backpressure.Inc() }

func (o *transportObs) RegisteredPeers(delta int) { o.peers.Add(float64(delta)) }

func (o *transportObs) ActiveConnections(delta int) { o.conns.Add(float64(delta)) }

func (o *transportObs) FramesWritten(t ext.MessageType, n int) {
	if int(t) < ext.NumMessageTypes && n > 0 {
		o.framesWritten[t].Add(float64(n))
	}
}

func (o *transportObs) WriteDuration(d time.Duration) { o.writeDuration.Observe(d.Seconds()) }

func (o *transportObs) EgressQueueWait(d time.Duration) { o.egressWait.Observe(d.Seconds()) }

func (o *transportObs) Enabled() bool { return true }
