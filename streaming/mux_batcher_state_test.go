package streaming

import "testing"

// recordIllegal swaps the illegal-move hook for one that records, for the
// test's length.
func recordIllegal(t *testing.T) *[]string {
	t.Helper()
	var got []string
	old := onIllegalTransition
	onIllegalTransition = func(kind, from, to string) { got = append(got, kind+" "+from+"->"+to) }
	t.Cleanup(func() { onIllegalTransition = old })
	return &got
}

// TestBatcherStateMoves walks the whole table: every listed move is
// accepted, every other one is reported and counted.
func TestBatcherStateMoves(t *testing.T) {
	got := recordIllegal(t)
	before := illegalTransitions.Load()
	illegal := 0
	for from := batcherState(0); from < batcherStates; from++ {
		legal := map[batcherState]bool{}
		for _, n := range batcherMoves[from] {
			legal[n] = true
		}
		for next := batcherState(0); next < batcherStates; next++ {
			s := from
			n := len(*got)
			s.to(next)
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
	if d := illegalTransitions.Load() - before; d != uint64(illegal) {
		t.Errorf("counted %d illegal moves, want %d", d, illegal)
	}
	// A few that must never pass: back to live, out of a stopped state,
	// a retired batcher superseded.
	for _, m := range [][2]batcherState{{batcherSuperseded, batcherLive}, {batcherClosed, batcherLive}, {batcherEvicted, batcherSuperseded}, {batcherRetired, batcherSuperseded}} {
		if m[0].legal(m[1]) {
			t.Errorf("%v -> %v is legal", m[0], m[1])
		}
	}
}

// TestBatcherStateStop checks that stop has a stopped state for every
// state, reached by a legal move (or none, when already stopped), except
// for the retired batcher whose goodbye has not run, which the close
// never stops.
func TestBatcherStateStop(t *testing.T) {
	for s := batcherState(0); s < batcherStates; s++ {
		next := stoppedState[s]
		if !next.stopped() {
			t.Errorf("stop of %v goes to %v, which is not stopped", s, next)
		}
		if next != s && !s.legal(next) && s != batcherRetired {
			t.Errorf("stop of %v: %v -> %v is not a legal move", s, s, next)
		}
	}
}

// TestBatcherStateQuestions pins what each state answers, as the old
// flag combinations did (mayWrite was retired || !(stopped || superseded)).
func TestBatcherStateQuestions(t *testing.T) {
	type flags struct{ superseded, lost, retired, closing, stopped bool }
	of := map[batcherState]flags{
		batcherLive:        {},
		batcherSuperseded:  {superseded: true},
		batcherLost:        {superseded: true, lost: true},
		batcherRetired:     {retired: true},
		batcherClosing:     {retired: true, closing: true},
		batcherHalted:      {stopped: true},
		batcherEvicted:     {superseded: true, stopped: true},
		batcherLostStopped: {superseded: true, lost: true, stopped: true},
		batcherClosed:      {retired: true, closing: true, stopped: true},
	}
	for s, f := range of {
		if got, want := s.mayWrite(), f.retired || !(f.stopped || f.superseded); got != want {
			t.Errorf("%v.mayWrite() = %v, want %v", s, got, want)
		}
		if got, want := s.handsOn(), f.superseded && !f.retired; got != want {
			t.Errorf("%v.handsOn() = %v, want %v", s, got, want)
		}
		if got, want := s.buildsData(), !(f.closing || f.superseded && !f.retired); got != want {
			t.Errorf("%v.buildsData() = %v, want %v", s, got, want)
		}
		if s.dropsReplies() != f.lost || s.stopped() != f.stopped || s.saidGoodbye() != f.closing {
			t.Errorf("%v: dropsReplies/stopped/saidGoodbye = %v/%v/%v, want %v/%v/%v", s,
				s.dropsReplies(), s.stopped(), s.saidGoodbye(), f.lost, f.stopped, f.closing)
		}
	}
	if len(of) != int(batcherStates) {
		t.Errorf("pinned %d states of %d", len(of), batcherStates)
	}
}

// TestStreamLifeMoves walks the outSlot's table as TestBatcherStateMoves
// walks the batcher's, and pins the two questions the old booleans
// answered.
func TestStreamLifeMoves(t *testing.T) {
	got := recordIllegal(t)
	for from := streamLife(0); from < streamLives; from++ {
		legal := map[streamLife]bool{}
		for _, n := range streamLifeMoves[from] {
			legal[n] = true
		}
		for next := streamLife(0); next < streamLives; next++ {
			s, n := from, len(*got)
			s.to(next)
			if reported := len(*got) > n; reported == legal[next] {
				t.Errorf("%v -> %v: reported %v, legal %v", from, next, reported, legal[next])
			}
		}
	}
	// end and close from every state not yet gone are legal moves.
	for _, from := range []streamLife{slotLive, slotEnding, slotClosed} {
		n := len(*got)
		if s := from; !s.terminal() {
			s.end()
			if !s.terminal() || s.closed() != from.closed() {
				t.Errorf("end of %v gave %v", from, s)
			}
		}
		if s := from; !s.closed() {
			s.close()
			if !s.closed() || s.terminal() != from.terminal() {
				t.Errorf("close of %v gave %v", from, s)
			}
		}
		if len(*got) != n {
			t.Errorf("end or close of %v was reported illegal: %v", from, (*got)[n:])
		}
	}
	s := slotEnded
	n := len(*got)
	s.close() // a slot closed twice
	if len(*got) != n+1 {
		t.Error("closing an ended slot was not reported")
	}
}
