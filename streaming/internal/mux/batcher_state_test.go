package mux

import (
	"testing"
)

// recordIllegal swaps the illegal-move hook for one that records, for the
// test's length.
func recordIllegal(t *testing.T) *[]string {
	t.Helper()
	var got []string
	old := OnIllegalTransition
	OnIllegalTransition = func(kind, from, to string) { got = append(got, kind+" "+from+"->"+to) }
	t.Cleanup(func() { OnIllegalTransition = old })
	return &got
}

// TestBatcherStateMoves walks the whole table: every listed move is
// accepted, every other one is reported and counted.
func TestBatcherStateMoves(t *testing.T) {
	got := recordIllegal(t)
	before := IllegalTransitions.Load()
	illegal := 0
	for from := BatcherState(0); from < BatcherStates; from++ {
		legal := map[BatcherState]bool{}
		for _, n := range BatcherMoves[from] {
			legal[n] = true
		}
		for next := BatcherState(0); next < BatcherStates; next++ {
			s := from
			n := len(*got)
			s.To(next)
			if s != next {
				t.Errorf("%v.to(%v) left %v", from, next, s)
			}
			reported := len(*got) > n
			if reported == legal[next] {
				t.Errorf("%v -> %v: reported %v, legal %v", from, next, reported, legal[next])
			}
			if !legal[next] {
				illegal++
			}
		}
	}
	if d := IllegalTransitions.Load() - before; d != uint64(illegal) {
		t.Errorf("counted %d illegal moves, want %d", d, illegal)
	}
	// A few that must never pass: back to live, out of a stopped state,
	// a retired batcher superseded.
	for _, m := range [][2]BatcherState{{BatcherSuperseded, BatcherLive}, {BatcherClosed, BatcherLive}, {BatcherEvicted, BatcherSuperseded}, {BatcherRetired, BatcherSuperseded}} {
		if m[0].Legal(m[1]) {
			t.Errorf("%v -> %v is legal", m[0], m[1])
		}
	}
}

// TestBatcherStateStop checks that stop has a stopped state for every
// state, reached by a legal move (or none, when already stopped), except
// for the retired batcher whose goodbye has not run, which the close
// never stops.
func TestBatcherStateStop(t *testing.T) {
	for s := BatcherState(0); s < BatcherStates; s++ {
		next := StoppedState[s]
		if !next.Stopped() {
			t.Errorf("stop of %v goes to %v, which is not stopped", s, next)
		}
		if next != s && !s.Legal(next) && s != BatcherRetired {
			t.Errorf("stop of %v: %v -> %v is not a legal move", s, s, next)
		}
	}
}

// TestBatcherStateQuestions pins what each state answers, as the old
// flag combinations did (mayWrite was retired || !(stopped || superseded)).
func TestBatcherStateQuestions(t *testing.T) {
	type flags struct{ superseded, lost, retired, closing, stopped bool }
	of := map[BatcherState]flags{
		BatcherLive:        {},
		BatcherSuperseded:  {superseded: true},
		BatcherLost:        {superseded: true, lost: true},
		BatcherRetired:     {retired: true},
		BatcherClosing:     {retired: true, closing: true},
		BatcherHalted:      {stopped: true},
		BatcherEvicted:     {superseded: true, stopped: true},
		BatcherLostStopped: {superseded: true, lost: true, stopped: true},
		BatcherClosed:      {retired: true, closing: true, stopped: true},
	}
	for s, f := range of {
		if got, want := s.MayWrite(), f.retired || !(f.stopped || f.superseded); got != want {
			t.Errorf("%v.mayWrite() = %v, want %v", s, got, want)
		}
		if got, want := s.HandsOn(), f.superseded && !f.retired; got != want {
			t.Errorf("%v.handsOn() = %v, want %v", s, got, want)
		}
		if got, want := s.BuildsData(), !(f.closing || f.superseded && !f.retired); got != want {
			t.Errorf("%v.buildsData() = %v, want %v", s, got, want)
		}
		if s.DropsReplies() != f.lost || s.Stopped() != f.stopped || s.SaidGoodbye() != f.closing {
			t.Errorf("%v: dropsReplies/stopped/saidGoodbye = %v/%v/%v, want %v/%v/%v", s,
				s.DropsReplies(), s.Stopped(), s.SaidGoodbye(), f.lost, f.stopped, f.closing)
		}
	}
	if len(of) != int(BatcherStates) {
		t.Errorf("pinned %d states of %d", len(of), BatcherStates)
	}
}

// TestStreamLifeMoves walks the OutSlot's table as TestBatcherStateMoves
// walks the batcher's, and pins the two questions the old booleans
// answered.
func TestStreamLifeMoves(t *testing.T) {
	got := recordIllegal(t)
	for from := StreamLife(0); from < StreamLives; from++ {
		legal := map[StreamLife]bool{}
		for _, n := range StreamLifeMoves[from] {
			legal[n] = true
		}
		for next := StreamLife(0); next < StreamLives; next++ {
			s, n := from, len(*got)
			s.To(next)
			if reported := len(*got) > n; reported == legal[next] {
				t.Errorf("%v -> %v: reported %v, legal %v", from, next, reported, legal[next])
			}
		}
	}
	// end and close from every state not yet gone are legal moves.
	for _, from := range []StreamLife{SlotLive, SlotEnding, SlotClosed} {
		n := len(*got)
		if s := from; !s.Terminal() {
			s.End()
			if !s.Terminal() || s.Closed() != from.Closed() {
				t.Errorf("end of %v gave %v", from, s)
			}
		}
		if s := from; !s.Closed() {
			s.Close()
			if !s.Closed() || s.Terminal() != from.Terminal() {
				t.Errorf("close of %v gave %v", from, s)
			}
		}
		if len(*got) != n {
			t.Errorf("end or close of %v was reported illegal: %v", from, (*got)[n:])
		}
	}
	s := SlotEnded
	n := len(*got)
	s.Close() // a slot closed twice
	if len(*got) != n+1 {
		t.Error("closing an ended slot was not reported")
	}
}
