package ext_test

import (
	"slices"
	"testing"

	"github.com/velo-go/velo/ext"
)

// A fence caps what is admitted in total, drained or not; what is past it
// waits in order, a first send goes ahead of the waiters, and Lift lets
// the waiters in in order.
func TestGateFenceCapsTotalAdmissionUntilLifted(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 1000)
	g.Fence(100, func(_ unitItem, units int) int { return units + 10 })
	var outs []ext.SendOutcome
	for i := range 6 {
		out, err := g.Send(unitItem{id: i, units: 20}, 20)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	// 3 items cost 90 of the 100; the fourth would be 120.
	for i, out := range outs {
		if want := i < 3; out.Admitted() != want {
			t.Fatalf("send %d admitted=%v, want %v", i, out.Admitted(), want)
		}
	}
	// Draining the sink frees capacity, not the fence.
	var taken []int
	g.Drain(s.takeN(-1, &taken))
	if g.Pending() != 3 {
		t.Fatalf("pending after a drain = %d, want 3: the fence counts what was admitted, not what waits", g.Pending())
	}
	if err := g.SendFirst(unitItem{id: 99, units: 5}, 5); err != nil {
		t.Fatal(err)
	}
	if !g.Lift() {
		t.Fatal("Lift reported no fence")
	}
	if g.Lift() || g.Fenced() {
		t.Fatal("a lifted fence is still up")
	}
	for i, out := range outs[3:] {
		if !out.Admitted() {
			select {
			case <-out.Admission().Done():
			default:
				t.Fatalf("send %d still waits after Lift", i+3)
			}
		}
	}
	if ids := sinkIDs(g, s); !slices.Equal(ids, []int{99, 3, 4, 5}) {
		t.Fatalf("sink after Lift = %v, want the first send ahead of the waiters, in order", ids)
	}
}

// A fence lets one item larger than its budget through when nothing was
// admitted under it yet, as the capacity does: nothing is refused for size.
func TestGateFenceAdmitsALargeFirstItem(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 1000)
	g.Fence(100, func(_ unitItem, units int) int { return units })
	first, _ := g.Send(unitItem{id: 0, units: 500}, 500)
	second, _ := g.Send(unitItem{id: 1, units: 1}, 1)
	if !first.Admitted() || second.Admitted() {
		t.Fatalf("admitted first=%v second=%v, want true, false", first.Admitted(), second.Admitted())
	}
}

// An item the cost function calls free passes a full fence unless sends
// wait ahead of it: order holds.
func TestGateFenceLetsFreeItemsThroughInOrder(t *testing.T) {
	s := newSliceSink()
	g := ext.NewAdmissionGate[unitItem](s, 1000)
	g.Fence(10, func(it unitItem, units int) int {
		if it.id < 0 {
			return 0
		}
		return units
	})
	a, _ := g.Send(unitItem{id: 1, units: 10}, 10)
	free, _ := g.Send(unitItem{id: -1, units: 50}, 50)
	b, _ := g.Send(unitItem{id: 2, units: 10}, 10)
	behind, _ := g.Send(unitItem{id: -2, units: 50}, 50)
	if !a.Admitted() || !free.Admitted() || b.Admitted() || behind.Admitted() {
		t.Fatalf("admitted %v %v %v %v, want true true false false", a.Admitted(), free.Admitted(), b.Admitted(), behind.Admitted())
	}
}
