package streaming

import (
	"sync"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// An anchor may name the instance expected to open it (ExpectOpener): the
// producer that was handed its handle or its ticket. Until a producer's
// stream flows, the anchor waits on its reservation (the unattached
// timeout, the accept window of a bind, a pre-bind's window), which can be
// minutes; if the messenger reports the opener lost, the wait is pointless,
// so the anchor ends at once with ErrOpenerLost.

// ExpectOpener names the instance expected to attach to the anchor (or to
// open its pre-bind). If the node's messenger reports that instance lost
// while the anchor waits for it (unattached, bound or pre-bound, with
// nothing flowing yet), the anchor ends with ErrOpenerLost, instead of at
// its reservation's window. A stream that flows is not affected: its
// producer's loss ends it as before (ErrSenderDropped). It needs a Manager
// from NewNodeManager; on another Manager it does nothing.
func ExpectOpener(id ext.InstanceID) AnchorOption {
	return AnchorOption{func(c *anchorConfig) { c.opener = id }}
}

// openers indexes the anchors that name an opener, by that opener.
type openers struct {
	mu sync.Mutex
	m  map[ext.InstanceID]map[*inlet.State]struct{}
}

func (o *openers) add(id ext.InstanceID, st *inlet.State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[ext.InstanceID]map[*inlet.State]struct{})
	}
	set := o.m[id]
	if set == nil {
		set = make(map[*inlet.State]struct{})
		o.m[id] = set
	}
	set[st] = struct{}{}
}

func (o *openers) drop(id ext.InstanceID, st *inlet.State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if set := o.m[id]; set != nil {
		delete(set, st)
		if len(set) == 0 {
			delete(o.m, id)
		}
	}
}

// take removes and returns the anchors that wait for id.
func (o *openers) take(id ext.InstanceID) []*inlet.State {
	o.mu.Lock()
	defer o.mu.Unlock()
	set := o.m[id]
	delete(o.m, id)
	out := make([]*inlet.State, 0, len(set))
	for st := range set {
		out = append(out, st)
	}
	return out
}

// openerLost ends, with ErrOpenerLost, every anchor of m that waits for
// the lost instance id.
func (m *Manager) openerLost(id ext.InstanceID) {
	for _, st := range m.openers.take(id) {
		if st.OpenerLost() {
			m.remote.log.Warn("velo: stream anchor ended: the instance expected to open it was lost",
				"anchor", st.Handle(), "opener", id)
		}
	}
}
