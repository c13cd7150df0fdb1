package streaming

import (
	"time"

	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// Read-only views of the Manager for a node's live debug page
// (velo.Node.Snapshot). They read the registry shard by shard and each
// anchor or mux table under its own lock, briefly; none holds a lock
// across the whole walk, so a view is a sample of a moving system.

// AnchorPhases names the phases an AnchorView reports, in order:
// unattached, attached, stopping, ended, cancelled.
var AnchorPhases = func() []string {
	out := make([]string, inlet.NumPhases)
	for p := range inlet.NumPhases {
		out[p] = p.String()
	}
	return out
}()

// AnchorView is one anchor of the registry, as a debug view shows it.
type AnchorView struct {
	// Handle names the anchor. It is a credential (a producer needs
	// nothing else to attach), so a view that leaves the process should
	// show only part of it.
	Handle AnchorHandle
	// Phase is one of AnchorPhases.
	Phase string
	// Via is how an attached producer reaches it: "local", "mux",
	// "stream" or "mpsc"; "" while not attached.
	Via string
	// Queued is how many frames wait for the consumer.
	Queued int
	// Producers counts an MPSC anchor's attached producers.
	Producers int
	// Expires is its unattached deadline while one runs.
	Expires time.Time
}

// VisitAnchors calls fn for every anchor in the registry (created, and
// neither ended and read nor closed). It copies one shard's anchors at a
// time under the shard's lock and reads each anchor after letting it go,
// so fn may take its time without holding up registration.
func (m *Manager) VisitAnchors(fn func(AnchorView)) {
	var batch []*inlet.State
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		batch = batch[:0]
		for _, st := range s.m {
			batch = append(batch, st)
		}
		s.mu.Unlock()
		for _, st := range batch {
			v := st.View()
			fn(AnchorView{
				Handle: st.Handle(), Phase: v.Phase.String(), Via: v.Via,
				Queued: v.Queued, Producers: v.Producers, Expires: v.Expires,
			})
		}
	}
	clear(batch)
}

// MuxBatcherView is one (peer, lane) batcher of the mux: the egress side.
// Withheld counts records taken from producers and not yet sent (out of
// credit, or fenced behind a staged record), QueuedBytes their bytes;
// Credit is the data credit the live slots hold unspent and Window the
// credit they opened with; Starved counts live slots with records queued
// and no credit.
type MuxBatcherView = mux.BatcherView

// MuxIngressView is one (peer, lane) ingress table of the mux: the
// receiving side. HeldRecords wait in ahead-of-sequence holds; Credit is
// what the peer's producers hold on these slots, as this side counts it.
type MuxIngressView = mux.IngressView

// MuxPeerView is the mux's state for one peer: its batchers and ingress
// tables by lane, and the peer's byte budget (BudgetBytes queued of
// BudgetLimit; HoldBytes in ingress holds).
type MuxPeerView = mux.PeerView

// MuxView reads the mux's state per peer, in worker order; nil when the
// Manager has no mux (a Manager of one worker, or the mux disabled).
func (m *Manager) MuxView() []MuxPeerView {
	if m.remote == nil || m.remote.mux == nil {
		return nil
	}
	return m.remote.mux.View()
}
