package mux

import (
	"math/rand/v2"
	"testing"

	"github.com/velo-go/velo/internal/muxwire"
)

// TestCreditOwedMatchesMap drives CreditOwed and a map with the same
// random adds, deletes, partial takes and clears, over few slot indexes
// and several generations each (so that two generations of one index are
// often owed at once), and checks that they always agree.
func TestCreditOwedMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var c CreditOwed
	want := map[muxwire.SlotID]uint32{}
	check := func(step int) {
		t.Helper()
		if c.Len() != len(want) {
			t.Fatalf("step %d: %d entries, want %d", step, c.Len(), len(want))
		}
		seen := map[muxwire.SlotID]bool{}
		for _, e := range c.All() {
			if seen[e.ID] {
				t.Fatalf("step %d: %v listed twice", step, e.ID)
			}
			seen[e.ID] = true
			if want[e.ID] != e.Delta {
				t.Fatalf("step %d: %v owes %d, want %d", step, e.ID, e.Delta, want[e.ID])
			}
		}
		for id, d := range want {
			if got := c.Get(id); got != d {
				t.Fatalf("step %d: Get(%v) = %d, want %d", step, id, got, d)
			}
		}
	}
	for step := range 20000 {
		id, _ := muxwire.NewSlotID(uint32(rng.IntN(6)), uint8(rng.IntN(3)))
		switch r := rng.IntN(100); {
		case r < 60:
			d := uint32(rng.IntN(4) + 1)
			c.Add(id, d)
			want[id] += d
		case r < 85:
			c.Delete(id)
			delete(want, id)
		case r < 95:
			if c.Len() > 0 {
				n := rng.IntN(c.Len())
				for _, e := range c.All()[:n] {
					delete(want, e.ID)
				}
				c.dropFirst(n)
			}
		default:
			c.Clear()
			clear(want)
		}
		check(step)
	}
}

// TestCreditOwedKeepsFirstOwedOrder: with no deletes between, the
// entries come out in the order they were first owed, so a batch too
// small for all of them sends the longest owed first.
func TestCreditOwedKeepsFirstOwedOrder(t *testing.T) {
	var c CreditOwed
	for _, i := range []uint32{5, 1, 9, 1, 5} {
		id, _ := muxwire.NewSlotID(i, 0)
		c.Add(id, 1)
	}
	var got []uint32
	for _, e := range c.All() {
		got = append(got, e.ID.Index())
	}
	if len(got) != 3 || got[0] != 5 || got[1] != 1 || got[2] != 9 {
		t.Fatalf("order %v, want [5 1 9]", got)
	}
}
