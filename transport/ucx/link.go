package ucx

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/ext"
)

// link is this node's endpoint to one remote worker incarnation: a
// registered peer's, or a stranger's that said hello and is answered
// through it (drain echoes, pongs). The endpoint is created at first use
// (or at Register with WithEagerEndpoints) and again after UCX failed it
// or the reaper closed it; the link itself lives as long as the peer is
// registered.
type link struct {
	t      *Transport
	remote endpoint
	peer   ext.InstanceID // zero for a stranger

	// lastUse is the reaper's clock for the link (nanoseconds since
	// t.epoch), stamped only while the reaper runs.
	lastUse atomic.Int64

	mu      sync.Mutex
	cur     *epRef        // the live endpoint, nil when there is none
	dialing chan struct{} // non-nil while a Connect runs; closed when it returns
	closed  bool          // unregistered or replaced: no endpoint from now on
}

// epRef is one UCX endpoint of a link. Its counts are what the reaper
// reads: an endpoint with a send or a GET outstanding is never closed.
type epRef struct {
	id       endpointID
	l        *link
	inflight atomic.Int64  // sends posted and not done
	gets     atomic.Int64  // GETs posted and not done
	failed   chan struct{} // closed once UCX failed the endpoint
	failErr  error         // why, set before failed closes
	gone     atomic.Bool   // detached from its link: failed, reaped or closed
}

func newLink(t *Transport, remote endpoint, peer ext.InstanceID) *link {
	l := &link{t: t, remote: remote, peer: peer}
	l.lastUse.Store(t.now())
	return l
}

// remoteName names the far end's worker by its incarnation, for the
// node's peer events and lane views.
func (l *link) remoteName() string { return fmt.Sprintf("ucx:%016x", l.remote.incarnation) }

// who names the link's far end in errors.
func (l *link) who() string {
	if l.peer.IsZero() {
		return fmt.Sprintf("incarnation %#x", l.remote.incarnation)
	}
	return l.peer.String()
}

// acquire returns the link's endpoint, creating it when there is none,
// with sends and gets already counted on it: the caller posts them and
// calls sendDone or getDone for each. Concurrent callers share one
// Connect. It is never called on the worker's progress goroutine.
func (l *link) acquire(sends, gets int64) (*epRef, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, ext.ErrConnectionClosed
		}
		if r := l.cur; r != nil {
			r.inflight.Add(sends)
			r.gets.Add(gets)
			l.mu.Unlock()
			l.t.stamp(l)
			return r, nil
		}
		if ch := l.dialing; ch != nil {
			l.mu.Unlock()
			<-ch
			continue
		}
		ch := make(chan struct{})
		l.dialing = ch
		l.mu.Unlock()

		r, err := l.dial()

		l.mu.Lock()
		l.dialing = nil
		close(ch)
		if err != nil {
			l.mu.Unlock()
			l.t.dialFailed(l, err)
			return nil, err
		}
		if l.closed {
			l.mu.Unlock()
			l.t.dropEP(r)
			return nil, ext.ErrConnectionClosed
		}
		l.cur = r
		l.mu.Unlock()
		if !l.peer.IsZero() {
			l.t.core.Adapter().ReportPeerConnected(l.peer, Key, l.remoteName())
		}
	}
}

// dial creates an endpoint and posts the hello on it, before anything
// else can be sent on it. Idle time starts when Connect returns.
func (l *link) dial() (*epRef, error) {
	t := l.t
	id, err := t.w.Connect(l.remote.workerAddr)
	if err != nil {
		return nil, fmt.Errorf("ucx: endpoint to %s: %w: %w", l.who(), ext.ErrPeerUnreachable, err)
	}
	r := &epRef{id: id, l: l, failed: make(chan struct{})}
	if early := t.adopt(r); early != nil {
		t.w.CloseEndpoint(id)
		return nil, fmt.Errorf("ucx: endpoint to %s: %w: %w", l.who(), ext.ErrPeerUnreachable, early)
	}
	t.core.Observe().ActiveConnections(1)
	l.stampNow()
	r.inflight.Add(1)
	if err := t.w.SendAM(id, AMIDBase+uint16(kindHello), t.helloHeader, t.helloBody, func(error) { r.sendDone() }); err != nil {
		r.sendDone()
	}
	return r, nil
}

// sendDone counts one send of r done. The completion of the last one
// restarts the idle clock (an endpoint is idle only when nothing is in
// flight on it and nothing completed for the timeout). It runs on the
// progress goroutine.
func (r *epRef) sendDone() {
	if r.inflight.Add(-1) == 0 {
		r.l.t.stamp(r.l)
	}
}

// getDone counts one GET of r done, and restarts the idle clock.
func (r *epRef) getDone() {
	r.gets.Add(-1)
	r.l.t.stamp(r.l)
}

// detach takes r off its link if it is still the link's endpoint, and
// reports whether this call did (once per endpoint).
func (r *epRef) detach() bool {
	if !r.gone.CompareAndSwap(false, true) {
		return false
	}
	l := r.l
	l.t.core.Observe().ActiveConnections(-1)
	l.mu.Lock()
	if l.cur == r {
		l.cur = nil
	}
	l.mu.Unlock()
	return true
}

// close forgets the link: its endpoint closes (flushing what was posted)
// and it opens no other.
func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	r := l.cur
	l.mu.Unlock()
	if r != nil {
		l.t.dropEP(r)
	}
}

// isClosed reports whether the link was closed (unregistered, replaced).
func (l *link) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// stampNow is stamp with the clock read unconditionally: the creation of
// an endpoint starts its idle time.
func (l *link) stampNow() {
	if l.t.reapOn {
		l.touch(l.t.now())
	}
}

// touch moves the link's clock forward to now, never back.
func (l *link) touch(now int64) {
	for {
		old := l.lastUse.Load()
		if old >= now || l.lastUse.CompareAndSwap(old, now) {
			return
		}
	}
}
