package hub

import (
	"context"
	"fmt"

	"github.com/velo-go/velo/hub/store"
)

// reserveExisting installs the removal hook and reserves each entry the
// store already holds (a restart on a persistent store): nobody can claim
// such an instance without a credential whose digest the record keeps,
// peer lookups go on, and the hub's velo node learns each peer so that
// its probes reach them. A pinned entry of an earlier hub run is
// removed: that hub is gone. The hook cannot be removed, so this is the
// last step that can fail.
func (h *Hub) reserveExisting() error {
	snap, err := h.st.InstallRemovalHook(h.onRemoval)
	if err != nil {
		return fmt.Errorf("hub: installing the removal hook: %w", err)
	}
	top := h.epoch.Load()
	for _, e := range snap {
		top = max(top, uint64(e.Epoch))
		id := e.Peer.InstanceID
		if e.Pinned {
			if h.pinned == nil || id != h.pinned.Peer.InstanceID {
				h.removeStalePinned(e)
			}
			continue
		}
		h.auth.put(id, &grant{kind: grantReserved, lease: Lease{Incarnation: e.Incarnation, Epoch: e.Epoch},
			digests: e.Credentials})
		if h.node != nil {
			if err := h.node.RegisterPeer(e.Peer); err != nil {
				h.log.Warn("hub: a recovered peer's address is not usable", "instance", id, "err", err)
			}
		}
	}
	h.epoch.Store(top)
	return nil
}

func (h *Hub) removeStalePinned(e store.Entry) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.stepTimeout())
	defer cancel()
	if err := h.st.Remove(ctx, e.Peer.InstanceID, e.Incarnation); err != nil {
		h.log.Warn("hub: removing an earlier hub's pinned entry", "instance", e.Peer.InstanceID, "err", err)
	}
}
