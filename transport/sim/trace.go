package sim

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// EventKind says what an Event records.
type EventKind uint8

// The kinds of Event.
const (
	SendEv  EventKind = iota // the fabric accepted a message
	Deliver                  // a message reached its destination's handler
	Loss                     // a message was lost on the way (Config.Loss)
	Drop                     // a message in flight was dropped (cut, kill, destination gone)
	Refuse                   // a send failed at once (partitioned, unknown destination)
	CutEv                    // a partition began
	HealEv                   // a partition ended
	KillEv                   // an endpoint died
	LeaveEv                  // an endpoint left
	NoteEv                   // a caller's own event (Net.Mark)
)

var kindNames = [...]string{"send", "deliver", "loss", "drop", "refuse", "cut", "heal", "kill", "leave", "note"}

func (k EventKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Event is one entry of a Net's trace.
type Event struct {
	At       time.Duration // virtual time since the Net was made
	Kind     EventKind
	Src, Dst string
	Lane     int
	Size     int
	Label    string // Config.Describe of the message
	Note     string // why it was dropped or refused
}

func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%12v %-7s %s", e.At, e.Kind, e.Src)
	if e.Dst != "" {
		fmt.Fprintf(&b, "->%s", e.Dst)
	}
	switch e.Kind {
	case SendEv, Deliver, Loss, Drop, Refuse:
		fmt.Fprintf(&b, " lane %d %dB %s", e.Lane, e.Size, e.Label)
	}
	if e.Note != "" {
		fmt.Fprintf(&b, " (%s)", e.Note)
	}
	return b.String()
}

// FormatTrace is the trace one event a line.
func FormatTrace(tr []Event) string {
	var b strings.Builder
	for _, e := range tr {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Digest is a hash of a trace: two runs with the same digest made the
// same events in the same order at the same virtual times.
func Digest(tr []Event) uint64 {
	h := fnv.New64a()
	for _, e := range tr {
		h.Write([]byte(e.String()))
		h.Write([]byte{'\n'})
	}
	return h.Sum64()
}

// FirstDifference is the index of the first event where a and b differ,
// or -1 when they are the same.
func FirstDifference(a, b []Event) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
