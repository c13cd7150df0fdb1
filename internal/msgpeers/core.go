package msgpeers

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
)

// FrameUnits is what a frame costs in its channel beyond its bytes, so a
// flood of empty frames is bounded too.
const FrameUnits = 64

// Core is one transport's peer table and the state its lanes share. Its
// zero value is not ready: call Init.
type Core struct {
	channelBytes int
	adapter      *ext.TransportAdapter
	obs          atomic.Pointer[obsBox]

	mu      sync.RWMutex
	peers   map[ext.InstanceID]*Peer
	started bool
	closing atomic.Bool
	writers sync.WaitGroup // lane writers and whatever Go starts
	stop    chan struct{}  // closed when the writers are to finish
	grace   atomic.Int64   // unix nanos at which the teardown grace ends

	sendFailed, drainRefused, routeFailed atomic.Uint64
}

type obsBox struct{ ext.Observability }

// Init readies c; channelBytes bounds each lane's gate.
func (c *Core) Init(channelBytes int) {
	c.channelBytes = channelBytes
	c.peers = map[ext.InstanceID]*Peer{}
	c.stop = make(chan struct{})
	c.obs.Store(&obsBox{ext.NopObservability{}})
}

// SetAdapter gives c the node's adapter; the transport calls it in Start,
// before anything can fail a frame.
func (c *Core) SetAdapter(a *ext.TransportAdapter) { c.adapter = a }

// Adapter is the node's adapter, once Start set it.
func (c *Core) Adapter() *ext.TransportAdapter { return c.adapter }

// MarkStarted lets Register take peers: Start has succeeded.
func (c *Core) MarkStarted() {
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
}

// SetObservability installs the metrics handle (nil for none).
func (c *Core) SetObservability(o ext.Observability) {
	if o == nil {
		o = ext.NopObservability{}
	}
	c.obs.Store(&obsBox{o})
}

// Observe is the metrics handle.
func (c *Core) Observe() ext.Observability { return c.obs.Load().Observability }

// SendFailed counts the frames admitted but not sent.
func (c *Core) SendFailed() uint64 { return c.sendFailed.Load() }

// DrainRefused counts the requests Deliver found the node draining for.
func (c *Core) DrainRefused() uint64 { return c.drainRefused.Load() }

// RouteFailed counts the inbound frames Deliver found the node stopped for.
func (c *Core) RouteFailed() uint64 { return c.routeFailed.Load() }

// Deliver hands a well-formed inbound frame to the node: it is counted,
// routed when it is not a request and admitted when it is. It reports
// whether the node drains and refused the request (counted in
// DrainRefused); the transport answers that with its own echo.
func (c *Core) Deliver(f ext.Frame) (refused bool) {
	obs := c.Observe()
	obs.Frames(ext.Inbound, f.Type, ext.Accepted, 1, f.Len())
	if f.Type != ext.Message {
		if !c.adapter.RouteFrame(f) {
			c.routeFailed.Add(1)
			obs.Rejection(ext.RejectRouteFailed)
		}
		return false
	}
	switch c.adapter.AdmitMessage(f) {
	case ext.Draining:
		c.drainRefused.Add(1)
		obs.Rejection(ext.RejectDraining)
		return true
	case ext.Disconnected:
		c.routeFailed.Add(1)
		obs.Rejection(ext.RejectRouteFailed)
	}
	return false
}

// Closing reports whether Shutdown has begun.
func (c *Core) Closing() bool { return c.closing.Load() }

// BeginShutdown marks the transport closing, under the table's lock so no
// Register slips in behind it, and starts the teardown grace. It returns
// when the grace ends and whether Start had succeeded; Send refuses from
// now on.
func (c *Core) BeginShutdown(grace time.Duration) (end time.Time, started bool) {
	end = time.Now().Add(grace)
	c.grace.Store(end.UnixNano())
	c.mu.Lock()
	c.closing.Store(true)
	started = c.started
	c.mu.Unlock()
	return end, started
}

// StopWriters tells every lane's writer to send what is queued within the
// grace and end.
func (c *Core) StopWriters() { close(c.stop) }

// WaitWriters waits for the lane writers and what Go started.
func (c *Core) WaitWriters() { c.writers.Wait() }

// Go runs f on a goroutine that WaitWriters waits for.
func (c *Core) Go(f func()) {
	c.writers.Add(1)
	go func() {
		defer c.writers.Done()
		f()
	}()
}

// PastGrace reports whether a teardown grace has ended.
func (c *Core) PastGrace() bool {
	g := c.grace.Load()
	return g != 0 && time.Now().UnixNano() > g
}

// Failed reports a frame admitted but not sent and lets its owner go.
func (c *Core) Failed(target ext.InstanceID, f ext.Frame, err error) {
	c.sendFailed.Add(1)
	c.Observe().Rejection(ext.RejectSendFailed)
	c.adapter.ReportSendError(target, f, err)
	f.Release()
}

// WithDefaultTimeout bounds ctx by d when it has no deadline of its own.
func WithDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
