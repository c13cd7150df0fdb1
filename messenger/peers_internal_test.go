package messenger

import (
	"testing"

	"github.com/velo-go/velo/ext"
)

// TestPeerTableFewAreScanned: get finds what the maps hold, no more,
// as peers come and go; up to fewPeers of them it finds them in the list
// (no hash of the id), above it in the map.
func TestPeerTableFewAreScanned(t *testing.T) {
	tab := newPeerTable()
	var ids []ext.InstanceID
	check := func() {
		t.Helper()
		byID := *tab.byID.Load()
		if few := tab.few.Load(); (few != nil) != (len(byID) <= fewPeers) || (few != nil && len(*few) != len(byID)) {
			t.Fatalf("%d peers: the list is %v", len(byID), few)
		}
		for _, id := range ids {
			p, ok := tab.get(id)
			if want, in := byID[id]; ok != in || p != want {
				t.Fatalf("%d peers: get(%v) = %p, %v; the map has %p, %v", len(byID), id, p, ok, want, in)
			}
		}
	}
	check()
	for range 2 * fewPeers {
		p := &peer{info: ext.PeerInfo{InstanceID: ext.NewInstanceID()}}
		ids = append(ids, p.info.InstanceID)
		tab.put(p)
		check()
	}
	// A replaced entry is found as the new one.
	p := &peer{info: ext.PeerInfo{InstanceID: ids[0]}}
	tab.put(p)
	if got, _ := tab.get(ids[0]); got != p {
		t.Fatal("get found the replaced entry")
	}
	for _, id := range ids {
		tab.remove(id)
		check()
	}
}
