package streaming

import (
	"github.com/velo-go/velo/streaming/internal/framepath"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// How the Manager and the paths meet the inlet (internal/inlet), which
// owns every anchor's lock and state.

// defaultCapacity is the number of frames an anchor's inlet holds before
// Send waits.
const defaultCapacity = 256

// Frames without a value, shared by every stream: the inlet's own, since
// it tells a Detached apart by its identity.
var (
	finalizedFrame = inlet.FinalizedFrame
	detachedFrame  = inlet.DetachedFrame
	droppedFrame   = inlet.DroppedFrame
)

// The inlet recycles the ring of a slot with the mux's default credit:
// the two must agree. (A negative constant does not convert to uint.)
const _ = uint(mux.DefaultInitialCredit-inlet.PooledCredit) + uint(inlet.PooledCredit-mux.DefaultInitialCredit)

// A per-stream producer's egress holds as many frames as an inlet, so
// that the two paths push back alike.
const _ = uint(defaultCapacity-framepath.EgressCapacity) + uint(framepath.EgressCapacity-defaultCapacity)

// inletOwner is the Manager as the inlet's Owner. A type of its own, so
// that Remove and CountExpired do not join the Manager's exported methods.
type inletOwner Manager

func (o *inletOwner) Remove(st *inlet.State) { (*Manager)(o).remove(st) }
func (o *inletOwner) CountExpired()          { (*Manager)(o).countExpired() }

// managerOf is the Manager of st.
func managerOf(st *inlet.State) *Manager {
	return (*Manager)(st.Home().Owner.(*inletOwner))
}
