package velo

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// fakeServices is a ServiceDiscovery in memory that counts its lists and,
// when watch is set, answers watches from a channel the test feeds.
type fakeServices struct {
	mu    sync.Mutex
	ids   map[string][]ext.InstanceID
	lists int
	watch chan ext.ServiceEvent
}

func (f *fakeServices) RegisterService(_ context.Context, s string, id ext.InstanceID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[string][]ext.InstanceID{}
	}
	f.ids[s] = append(f.ids[s], id)
	return nil
}

func (f *fakeServices) UnregisterService(context.Context, string, ext.InstanceID) error { return nil }

func (f *fakeServices) ListService(_ context.Context, s string) ([]ext.InstanceID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return f.ids[s], nil
}

type fakeWatcher struct{ *fakeServices }

func (f fakeWatcher) WatchService(ctx context.Context, s string) (<-chan ext.ServiceEvent, error) {
	out := make(chan ext.ServiceEvent)
	go func() {
		defer close(out)
		for {
			select {
			case ev := <-f.watch:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func newTestServices(t *testing.T, d ext.ServiceDiscovery, p Picker, ids ...ext.InstanceID) *services {
	t.Helper()
	for _, id := range ids {
		d.RegisterService(context.Background(), "w", id)
	}
	s := newServices(serviceConfig{disc: d, picker: p}, nil)
	t.Cleanup(s.close)
	return s
}

func threeIDs() []ext.InstanceID {
	return []ext.InstanceID{ext.NewInstanceID(), ext.NewInstanceID(), ext.NewInstanceID()}
}

func TestRoundRobinTakesTurns(t *testing.T) {
	s := newTestServices(t, &fakeServices{}, RoundRobin, threeIDs()...)
	counts := map[ext.InstanceID]int{}
	var last ext.InstanceID
	for i := 0; i < 9; i++ {
		id, finish, err := s.pick(context.Background(), "w", true)
		if err != nil {
			t.Fatal(err)
		}
		finish(nil)
		if id == last {
			t.Fatalf("pick %d repeated %s", i, id)
		}
		last = id
		counts[id]++
	}
	for id, n := range counts {
		if n != 3 {
			t.Fatalf("%s picked %d times of 9, want 3 (%v)", id, n, counts)
		}
	}
	if len(counts) != 3 {
		t.Fatalf("picked %d instances, want 3", len(counts))
	}
}

func TestLeastOutstandingTakesTheIdleOne(t *testing.T) {
	s := newTestServices(t, &fakeServices{}, LeastOutstanding, threeIDs()...)
	ctx := context.Background()
	finishes := map[ext.InstanceID]func(error){}
	for i := 0; i < 3; i++ { // three calls held: one on each
		id, finish, err := s.pick(ctx, "w", true)
		if err != nil {
			t.Fatal(err)
		}
		if finishes[id] != nil {
			t.Fatalf("call %d went to %s, which already has one outstanding", i, id)
		}
		finishes[id] = finish
	}
	var freed ext.InstanceID
	for id, f := range finishes {
		freed = id
		f(nil)
		break
	}
	for i := 0; i < 2; i++ { // the freed one is the only one with 0
		id, finish, err := s.pick(ctx, "w", true)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && id != freed {
			t.Fatalf("picked %s with one outstanding, want the idle %s", id, freed)
		}
		defer finish(nil)
	}
}

func TestNoInstanceNamesTheService(t *testing.T) {
	s := newTestServices(t, &fakeServices{}, RoundRobin)
	_, _, err := s.pick(context.Background(), "llm-worker", true)
	if !errors.Is(err, ErrNoInstance) || !strings.Contains(err.Error(), `"llm-worker"`) {
		t.Fatalf("empty service: %v", err)
	}
}

func TestLostInstanceIsSkipped(t *testing.T) {
	ids := threeIDs()
	s := newTestServices(t, &fakeServices{}, RoundRobin, ids...)
	ctx := context.Background()
	dead, finish, err := s.pick(ctx, "w", true)
	if err != nil {
		t.Fatal(err)
	}
	finish(ext.ErrPeerUnreachable)
	for i := 0; i < 10; i++ {
		id, finish, err := s.pick(ctx, "w", true)
		if err != nil {
			t.Fatal(err)
		}
		finish(nil)
		if id == dead {
			t.Fatalf("pick %d chose %s, whose call just failed on its connection", i, dead)
		}
	}
	// A handler's own error says the instance is alive: no skip.
	for _, id := range ids {
		if id != dead {
			_, f, _ := s.pick(ctx, "w", true)
			f(errors.New("handler failed"))
		}
	}
	for _, id := range ids { // the two others fail too: none is left
		if id != dead {
			s.finish(id, time.Now(), ext.ErrConnectionClosed)
		}
	}
	if _, _, err := s.pick(ctx, "w", true); !errors.Is(err, ErrNoInstance) {
		t.Fatalf("every instance lost: %v", err)
	}
}

func TestListedInstancesAreCached(t *testing.T) {
	f := &fakeServices{}
	s := newTestServices(t, f, RoundRobin, threeIDs()...)
	for i := 0; i < 20; i++ {
		if _, _, err := s.pick(context.Background(), "w", false); err != nil {
			t.Fatal(err)
		}
	}
	if f.lists != 1 {
		t.Fatalf("20 picks within the cache TTL listed %d times, want 1", f.lists)
	}
}

func TestWatchKeepsInstances(t *testing.T) {
	f := &fakeServices{watch: make(chan ext.ServiceEvent)}
	s := newTestServices(t, fakeWatcher{f}, RoundRobin)
	a, b := ext.NewInstanceID(), ext.NewInstanceID()
	go func() { f.watch <- ext.ServiceEvent{Kind: ext.ServiceInitial, IDs: []ext.InstanceID{a}} }()
	ctx := context.Background()
	if id, _, err := s.pick(ctx, "w", false); err != nil || id != a {
		t.Fatalf("first pick: %s, %v", id, err)
	}
	f.watch <- ext.ServiceEvent{Kind: ext.ServiceAdded, IDs: []ext.InstanceID{b}}
	f.watch <- ext.ServiceEvent{Kind: ext.ServiceRemoved, IDs: []ext.InstanceID{a}}
	// The unbuffered feed is taken only after the event before it was
	// applied, and the relay between takes one more, so two more events prove the
	// removal landed.
	f.watch <- ext.ServiceEvent{Kind: ext.ServiceAdded, IDs: []ext.InstanceID{b}}
	f.watch <- ext.ServiceEvent{Kind: ext.ServiceAdded, IDs: []ext.InstanceID{b}}
	for i := 0; i < 4; i++ {
		if id, _, err := s.pick(ctx, "w", false); err != nil || id != b {
			t.Fatalf("pick after the watch moved to %s: %s, %v", b, id, err)
		}
	}
	if f.lists != 0 {
		t.Fatalf("a watched service was listed %d times", f.lists)
	}
}

// TestSkippedInstanceComesBackWhenItAnswers: once the wait is over, the
// next pick starts a probe; the instance is picked again only after the
// probe got an answer, and a probe that fails keeps it skipped.
func TestSkippedInstanceComesBackWhenItAnswers(t *testing.T) {
	id := ext.NewInstanceID()
	s := newTestServices(t, &fakeServices{}, RoundRobin, id)
	answer := make(chan error)
	s.retryAfter = 0
	s.probe = func(_ context.Context, got ext.InstanceID) error {
		if got != id {
			t.Errorf("probed %s, want %s", got, id)
		}
		return <-answer
	}
	ctx := context.Background()
	s.finish(id, time.Now(), nil) // unknown yet: nothing to count
	_, finish, err := s.pick(ctx, "w", true)
	if err != nil {
		t.Fatal(err)
	}
	finish(ext.ErrPeerUnreachable)
	for _, probeErr := range []error{ext.ErrPeerUnreachable, nil} {
		if _, _, err := s.pick(ctx, "w", false); !errors.Is(err, ErrNoInstance) { // starts the probe
			t.Fatalf("pick while skipped: %v", err)
		}
		answer <- probeErr
		s.wg.Wait() // the probe has applied its answer
	}
	if got, _, err := s.pick(ctx, "w", false); err != nil || got != id {
		t.Fatalf("pick after the probe answered: %s, %v", got, err)
	}
}

// A call that went out before an instance failed, and is answered (or
// finishes) after the failure was noted, does not bring the instance
// back: under load the answer can have come before the instance died.
// Before, such a late success cleared the skip, and the next call went to
// the dead instance again.
func TestALateAnswerDoesNotUnskip(t *testing.T) {
	ids := threeIDs()
	s := newTestServices(t, &fakeServices{}, RoundRobin, ids...)
	ctx := context.Background()
	dead, early, err := s.pick(ctx, "w", true) // goes out first
	if err != nil {
		t.Fatal(err)
	}
	for {
		id, failing, err := s.pick(ctx, "w", true)
		if err != nil {
			t.Fatal(err)
		}
		if id == dead {
			failing(ext.ErrPeerUnreachable)
			break
		}
		failing(nil)
	}
	early(nil) // the early call's answer is handed over only now
	for i := range 10 {
		id, finish, err := s.pick(ctx, "w", true)
		if err != nil {
			t.Fatal(err)
		}
		finish(nil)
		if id == dead {
			t.Fatalf("pick %d chose %s after a success that started before its failure", i, dead)
		}
	}
}

// A listing that drops a failed instance and a later one that brings it
// back (a backend that has not yet seen it die) leave it marked: it is
// not picked again before it answers.
func TestAFailedInstanceKeepsItsMarkAcrossARelist(t *testing.T) {
	ids := threeIDs()
	s := newTestServices(t, &fakeServices{}, RoundRobin, ids...)
	ctx := context.Background()
	dead, finish, err := s.pick(ctx, "w", true)
	if err != nil {
		t.Fatal(err)
	}
	finish(ext.ErrPeerUnreachable)
	rest := withoutID(ids, dead)
	s.mu.Lock()
	s.setLocked("w", rest) // the listing drops it
	s.setLocked("w", ids)  // and the next brings it back
	s.mu.Unlock()
	neverPicks(t, s, dead, "which failed and only came back in a listing")
}

// TestACallInFlightAcrossARelistStillMarks: a listing drops an instance
// while a call to it is in flight, and that call then fails on the
// connection. The failure must still mark the instance, so that when a
// later listing brings it back (a backend that has not yet seen it die)
// it is not picked. Before, the listing forgot the instance and the
// failing call's mark went nowhere (TestServiceKill on fs failed so).
func TestACallInFlightAcrossARelistStillMarks(t *testing.T) {
	ids := threeIDs()
	s := newTestServices(t, &fakeServices{}, RoundRobin, ids...)
	ctx := context.Background()
	dead, finish, err := s.pick(ctx, "w", true)
	if err != nil {
		t.Fatal(err)
	}
	rest := withoutID(ids, dead)
	s.mu.Lock()
	s.setLocked("w", rest) // the listing drops it while the call is out
	s.mu.Unlock()
	finish(ext.ErrPeerUnreachable)
	s.mu.Lock()
	s.setLocked("w", ids) // and the next brings it back
	s.mu.Unlock()
	neverPicks(t, s, dead, "whose call failed while a listing had dropped it")
}

// withoutID is ids less id.
func withoutID(ids []ext.InstanceID, id ext.InstanceID) []ext.InstanceID {
	var rest []ext.InstanceID
	for _, x := range ids {
		if x != id {
			rest = append(rest, x)
		}
	}
	return rest
}

// neverPicks fails if any of ten picks of service "w" chooses dead.
func neverPicks(t *testing.T, s *services, dead ext.InstanceID, why string) {
	t.Helper()
	for i := range 10 {
		id, finish, err := s.pick(context.Background(), "w", true)
		if err != nil {
			t.Fatal(err)
		}
		finish(nil)
		if id == dead {
			t.Fatalf("pick %d chose %s, %s", i, dead, why)
		}
	}
}
