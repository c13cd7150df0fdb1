package mux

import (
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
)

// Lanes (docs/mux.md, "Lanes"): up to 16 ordered channels of batches
// to one peer, mux lane k on transport lane k. Everything that depends on
// order is kept per (peer, lane) (LaneKey). The receiver of a stream picks
// its lane when it binds the slot, and names it in the attach answer or
// the ticket; the sender uses that lane modulo the lanes it keeps to the
// receiver, so any lane is correct for any stream and only the spread
// changes.
//
// The receiver's choice:
//   - with a key: splitmix64(key) % lanes, the same in every build;
//   - an unkeyed attach: the lane with the least load from that sender,
//     its live slots plus the binds answered and not yet claimed;
//   - an unkeyed pre-bind (no sender known): the least load on this node,
//     live slots from every peer plus unclaimed pre-binds.
//
// Ties go to the lowest lane. A stream counts on the lane chosen for it,
// from the bind until its slot closes.

// laneLoad counts streams per lane.
type laneLoad [muxwire.Lanes]int

// Splitmix64 is the fixed hash of lane keys: one key gives one lane on
// every receiver with the same lane count.
func Splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// ClampLanes bounds a transport's lane count to what the mux uses.
func ClampLanes(n int) int { return max(1, min(n, muxwire.Lanes)) }

// pickLaneLocked chooses the lane of a new bind from peer (0: a pre-bind)
// among lanes. The caller holds mx.mu.
func (mx *Mux) pickLaneLocked(peer ext.WorkerID, lanes int, key *uint64) int {
	lanes = ClampLanes(lanes)
	if key != nil {
		return int(Splitmix64(*key) % uint64(lanes))
	}
	load := &mx.nodeLoad
	if peer != 0 {
		load = mx.peerLoadLocked(peer)
	}
	best := 0
	for l := 1; l < lanes; l++ {
		if load[l] < load[best] {
			best = l
		}
	}
	return best
}

func (mx *Mux) peerLoadLocked(peer ext.WorkerID) *laneLoad {
	l := mx.peerLoad[peer]
	if l == nil {
		l = new(laneLoad)
		mx.peerLoad[peer] = l
	}
	return l
}

// countLocked adds d streams on lane: to the node's load, and to peer's
// when peer is known.
func (mx *Mux) countLocked(peer ext.WorkerID, lane, d int) {
	mx.nodeLoad[lane] += d
	if peer != 0 {
		mx.peerLoadLocked(peer)[lane] += d
	}
}

// countPeerLocked adds d streams on lane to peer's load only: a pre-bind
// already counted on the node when a peer claims or adopts it.
func (mx *Mux) countPeerLocked(peer ext.WorkerID, lane, d int) {
	if peer != 0 {
		mx.peerLoadLocked(peer)[lane] += d
	}
}

// uncount takes a closed slot's stream off its lane's load.
func (mx *Mux) uncount(peer ext.WorkerID, lane int) {
	mx.Mu.Lock()
	mx.countLocked(peer, lane, -1)
	mx.Mu.Unlock()
}
