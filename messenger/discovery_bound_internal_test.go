package messenger

import (
	"testing"

	"github.com/velo-go/velo/ext"
)

// Two peers added one after the other, before the caller of the first add
// has unregistered its victim (two hellos handled at once), evict two
// different peers: a victim is dropped from the peers found as it is
// chosen. Before, both adds chose the same oldest peer and the node kept
// one peer over its bound (TestHellosCannotGrowThePeerTable's rare failure).
func TestConcurrentAddsEvictDistinctPeers(t *testing.T) {
	tab := newPeerTable()
	d := &discoveryState{found: map[ext.InstanceID]struct{}{}, limit: 2}
	add := func(use int64) ext.InstanceID {
		p := &peer{info: ext.PeerInfo{InstanceID: ext.NewInstanceID()}}
		p.lastUse.Store(use)
		tab.put(p)
		return p.info.InstanceID
	}
	d.add(tab, add(1))
	d.add(tab, add(2))
	v1, ok1 := d.add(tab, add(3))
	v2, ok2 := d.add(tab, add(4)) // v1 not unregistered yet
	if !ok1 || !ok2 {
		t.Fatalf("adds over the limit evicted nothing: %v %v", ok1, ok2)
	}
	if v1 == v2 {
		t.Fatalf("both adds evicted the same peer %s", v1)
	}
	if n := len(d.found); n != d.limit {
		t.Fatalf("%d peers found after the evictions, want the limit %d", n, d.limit)
	}
}
