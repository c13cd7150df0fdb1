package sim_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/transport/sim"
)

// drive delivers everything due, advancing the bubble's clock to each
// transfer in turn, as a deterministic harness does.
func drive(n *sim.Net) {
	for {
		synctest.Wait()
		due, ok := n.Next()
		if !ok {
			return
		}
		time.Sleep(time.Until(due))
		n.Step()
	}
}

type got struct{ lane, seq int }

// lossyRun sends 200 messages on each of 4 lanes from a to b and returns
// what b received, in order, and the trace.
func lossyRun(t *testing.T, seed uint64) ([]got, []sim.Event) {
	var out []got
	var tr []sim.Event
	synctest.Test(t, func(t *testing.T) {
		n := sim.NewNet(sim.Config{Seed: seed, Latency: time.Millisecond, Jitter: 3 * time.Millisecond, Bandwidth: 10 << 20, Loss: 0.05})
		a, _ := n.Attach("a", nil)
		_, _ = n.Attach("b", func(_ string, lane int, data []byte) {
			var l, s int
			fmt.Sscanf(string(data), "%d/%d", &l, &s)
			out = append(out, got{l, s})
		})
		for i := range 200 {
			for l := range 4 {
				if err := a.Send("b", l, fmt.Appendf(nil, "%d/%d", l, i), nil); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(100 * time.Microsecond)
			n.Settle()
		}
		drive(n)
		tr = n.Trace()
	})
	return out, tr
}

// TestLanesOrderedAndReordered: within a lane what arrives is in order
// (with gaps where messages were lost); across lanes, arrivals interleave
// out of send order; a seed gives the same trace every run, another seed
// another one.
func TestLanesOrderedAndReordered(t *testing.T) {
	out, tr := lossyRun(t, 7)
	last := map[int]int{0: -1, 1: -1, 2: -1, 3: -1}
	reordered, lost := false, 800-len(out)
	prev := got{-1, -1}
	for _, g := range out {
		if g.seq <= last[g.lane] {
			t.Fatalf("lane %d: %d after %d", g.lane, g.seq, last[g.lane])
		}
		last[g.lane] = g.seq
		if g.seq < prev.seq || (g.seq == prev.seq && g.lane < prev.lane) {
			reordered = true
		}
		prev = g
	}
	if !reordered {
		t.Error("no message of one lane overtook another lane's")
	}
	if lost == 0 || lost > 100 {
		t.Errorf("%d of 800 lost at 5%%", lost)
	}
	_, again := lossyRun(t, 7)
	if i := sim.FirstDifference(tr, again); i >= 0 {
		t.Fatalf("same seed, traces differ at event %d", i)
	}
	_, other := lossyRun(t, 8)
	if sim.Digest(other) == sim.Digest(tr) {
		t.Error("another seed made the same trace")
	}
}

// TestCutDropsInFlightAndRefuses: a partition drops what is in flight
// between the two and refuses their sends until healed; others go on.
func TestCutDropsInFlightAndRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := sim.NewNet(sim.Config{Latency: time.Millisecond})
		recvd := map[string]int{}
		a, _ := n.Attach("a", nil)
		for _, name := range []string{"b", "c"} {
			n.Attach(name, func(string, int, []byte) { recvd[name]++ })
		}
		a.Send("b", 0, []byte("1"), nil)
		a.Send("c", 0, []byte("1"), nil)
		n.Cut("b", "a")
		if err := a.Send("b", 0, []byte("2"), nil); !errors.Is(err, sim.ErrPartitioned) {
			t.Fatalf("send across a cut: %v", err)
		}
		drive(n)
		if recvd["b"] != 0 || recvd["c"] != 1 {
			t.Fatalf("received %v, want nothing at b and one at c", recvd)
		}
		n.Heal("a", "b")
		if err := a.Send("b", 0, []byte("3"), nil); err != nil {
			t.Fatal(err)
		}
		drive(n)
		if recvd["b"] != 1 {
			t.Fatalf("b got %d after the heal, want 1", recvd["b"])
		}
		kinds := map[sim.EventKind]int{}
		for _, e := range n.Trace() {
			kinds[e.Kind]++
		}
		if kinds[sim.Drop] != 1 || kinds[sim.Refuse] != 1 || kinds[sim.CutEv] != 1 || kinds[sim.HealEv] != 1 {
			t.Fatalf("trace kinds %v\n%s", kinds, sim.FormatTrace(n.Trace()))
		}
	})
}

// TestBandwidthSerializesALink: at 1 MB/s, ten 100 kB messages take a
// second of virtual time to cross, however close together they were sent.
func TestBandwidthSerializesALink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := sim.NewNet(sim.Config{Bandwidth: 1_000_000})
		a, _ := n.Attach("a", nil)
		var last time.Time
		n.Attach("b", func(string, int, []byte) { last = time.Now() })
		start := time.Now()
		for l := range 10 {
			a.Send("b", l%3, make([]byte, 100_000), nil)
		}
		drive(n)
		if d := last.Sub(start); d != time.Second {
			t.Fatalf("last delivery after %v, want 1s", d)
		}
	})
}

// TestKillTellsContacts: a killed endpoint's contacts hear of it once; a
// stranger does not.
func TestKillTellsContacts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := sim.NewNet(sim.Config{})
		var heard []string
		a, _ := n.Attach("a", nil)
		a.OnPeerDown(func(p string) { heard = append(heard, "a:"+p) })
		c, _ := n.Attach("c", nil)
		c.OnPeerDown(func(p string) { heard = append(heard, "c:"+p) })
		n.Attach("b", func(string, int, []byte) {})
		a.Send("b", 0, []byte("x"), nil)
		drive(n)
		n.Kill("b")
		n.Kill("b")
		if len(heard) != 1 || heard[0] != "a:b" {
			t.Fatalf("heard %v, want [a:b]", heard)
		}
		if err := a.Send("b", 0, nil, nil); !errors.Is(err, sim.ErrUnknownEndpoint) {
			t.Fatalf("send to the dead: %v", err)
		}
	})
}
