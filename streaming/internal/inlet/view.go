package inlet

import "time"

// What a debug view reads of an anchor: its phase and a few counts, in
// one short hold of the inlet's lock.

// Phase is where an anchor is in its life, as a debug view names it.
type Phase uint8

const (
	// PhaseUnattached: no producer holds the anchor; it waits for one.
	PhaseUnattached Phase = iota
	// PhaseAttached: a producer holds it and may send.
	PhaseAttached
	// PhaseStopping: the consumer asked the producer to stop; frames
	// still come until it does.
	PhaseStopping
	// PhaseEnded: the stream ended (a terminal or an error) and the
	// anchor waits for its consumer to read the end or close it.
	PhaseEnded
	// PhaseCancelled: the consumer cancelled or closed it.
	PhaseCancelled
	// NumPhases is the count of phases.
	NumPhases
)

var phaseNames = [NumPhases]string{"unattached", "attached", "stopping", "ended", "cancelled"}

func (p Phase) String() string {
	if p < NumPhases {
		return phaseNames[p]
	}
	return "unknown"
}

// View is an anchor as a debug view shows it.
type View struct {
	Phase Phase
	// Via is how the producer reaches it while attached: "local" (this
	// worker), "mux" (a mux slot), "stream" (a per-stream connection),
	// "mpsc" (producers of an MPSC anchor); "" otherwise.
	Via string
	// Queued is how many frames wait in the inlet for the consumer.
	Queued int
	// Producers is the count of attached producers of an MPSC anchor.
	Producers int
	// Expires is the unattached deadline, while one runs; zero otherwise.
	Expires time.Time
}

// View reads the anchor's view under its lock.
func (st *State) View() View {
	st.mu.Lock()
	defer st.mu.Unlock()
	v := View{Queued: st.q.n}
	switch {
	case st.cancelled || st.closed:
		v.Phase = PhaseCancelled
	case st.endErr != nil:
		v.Phase = PhaseEnded
	case st.attached && st.stopReq:
		v.Phase = PhaseStopping
	case st.attached:
		v.Phase = PhaseAttached
	}
	if st.mpsc != nil {
		v.Producers = st.mpsc.senders
		if v.Producers > 0 && v.Phase == PhaseUnattached {
			v.Phase = PhaseAttached
		}
	}
	if v.Phase == PhaseAttached || v.Phase == PhaseStopping {
		switch {
		case st.mpsc != nil:
			v.Via = "mpsc"
		case st.local:
			v.Via = "local"
		case st.feed != nil:
			v.Via = "mux"
		default:
			v.Via = "stream"
		}
	}
	if st.armed {
		v.Expires = st.home.Base.Add(time.Duration(st.deadline))
	}
	return v
}
