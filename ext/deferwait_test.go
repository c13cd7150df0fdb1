package ext_test

import (
	"testing"

	"github.com/velo-go/velo/ext"
)

// fakeReader is a reader's WaitDeferrer that keeps the waits handed to it.
type fakeReader struct {
	handoff  bool
	deferred []ext.Waiter
}

func (r *fakeReader) Handoff() bool          { return r.handoff }
func (r *fakeReader) DeferWait(w ext.Waiter) { r.deferred = append(r.deferred, w) }

// noWait is a sink's wait that returns at once.
type noWait struct{}

func (noWait) Wait() {}

// During a drain, the exempt requests of a batch go to the sink one by
// one. None of them is the batch's last, so none may offer the reader's
// role; a reader that makes the sink's waits itself must still be given
// them, or the sink would wait for a queue in the middle of the read, with
// the frames behind the batch unrouted.
func TestDrainExemptRequestsDeferWaits(t *testing.T) {
	type seen struct{ handoff, deferrer bool }
	var got []seen
	s, a := newAdapter(t, ext.AdapterConfig{
		DrainExempt: func(ext.Frame) bool { return true },
		OnMessagesHandoff: func(b []ext.InboundMessage, h ext.Handoff) {
			d, ok := h.(ext.WaitDeferrer)
			got = append(got, seen{handoff: ok && h.Handoff(), deferrer: ok})
			if ok {
				d.DeferWait(noWait{})
			}
			ext.DoneAll(b)
		},
	})
	s.BeginDrain()
	rd := &fakeReader{handoff: true}
	msgs := []ext.InboundMessage{{Frame: ext.Frame{Type: ext.Message}}, {Frame: ext.Frame{Type: ext.Message}}}
	if out, refused := a.AdmitBatchHandoff(msgs, rd); out != ext.Draining || len(refused) != 0 {
		t.Fatalf("AdmitBatchHandoff while draining = %v with %d refused, want Draining with none", out, len(refused))
	}
	want := []seen{{deferrer: true}, {deferrer: true}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("the sink saw %+v, want %+v", got, want)
	}
	if len(rd.deferred) != 2 {
		t.Fatalf("the reader was handed %d waits, want 2", len(rd.deferred))
	}
}
