package velo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/ext"
)

// flakyServices is a ServiceDiscovery in memory that can go unavailable:
// then its lists and watches fail with ext.ErrDiscoveryUnavailable (or
// with refuse, when set). As a watcher, each watch sends the current
// members, then what the test feeds; cut ends the open watch as a broken
// stream does.
type flakyServices struct {
	mu      sync.Mutex
	ids     []ext.InstanceID
	down    bool
	refuse  error
	lists   int
	watches int // WatchService calls
	feed    chan ext.ServiceEvent
	cut     chan struct{}
}

func newFlaky(ids ...ext.InstanceID) *flakyServices {
	return &flakyServices{ids: ids, feed: make(chan ext.ServiceEvent), cut: make(chan struct{})}
}

func (f *flakyServices) set(down bool, ids ...ext.InstanceID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down, f.ids = down, ids
}

func (f *flakyServices) fail() error {
	if f.refuse != nil {
		return f.refuse
	}
	if f.down {
		return fmt.Errorf("flaky: %w", ext.ErrDiscoveryUnavailable)
	}
	return nil
}

func (f *flakyServices) RegisterService(context.Context, string, ext.InstanceID) error   { return nil }
func (f *flakyServices) UnregisterService(context.Context, string, ext.InstanceID) error { return nil }

func (f *flakyServices) ListService(context.Context, string) ([]ext.InstanceID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if err := f.fail(); err != nil {
		return nil, err
	}
	return slices.Clone(f.ids), nil
}

type flakyWatcher struct{ *flakyServices }

func (f flakyWatcher) WatchService(ctx context.Context, _ string) (<-chan ext.ServiceEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watches++
	if err := f.fail(); err != nil {
		return nil, err
	}
	out := make(chan ext.ServiceEvent)
	first := ext.ServiceEvent{Kind: ext.ServiceInitial, IDs: slices.Clone(f.ids)}
	go func() {
		defer close(out)
		ev := first
		for {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
			select {
			case ev = <-f.feed:
			case <-f.cut:
				select {
				case out <- ext.ServiceEvent{Kind: ext.ServiceDisconnected}:
				case <-ctx.Done():
				}
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (f *flakyServices) counts() (lists, watches int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, f.watches
}

func staleOf(s *services, service string) (stale bool, backoff time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.sets[service]
	return set.stale, set.backoff
}

func mustPick(t *testing.T, s *services, want ...ext.InstanceID) ext.InstanceID {
	t.Helper()
	id, _, err := s.pick(context.Background(), "w", false)
	if err != nil || !slices.Contains(want, id) {
		t.Fatalf("pick: %s, %v; want one of %v", id, err, want)
	}
	return id
}

// TestListedServiceOutlivesItsBackend: a listed set whose backend goes
// unavailable keeps answering its last members (stale), asks the backend
// again only after a backoff that doubles, and is fresh again once the
// backend answers. A service never learned fails with the backend's
// error, and an error that is not unavailability is not hidden.
func TestListedServiceOutlivesItsBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := ext.NewInstanceID(), ext.NewInstanceID()
		f := newFlaky(a)
		s := newServices(serviceConfig{disc: f}, nil)
		defer s.close()
		mustPick(t, s, a)

		f.set(true, a)
		time.Sleep(ServiceCacheTTL)
		mustPick(t, s, a) // lists, fails, keeps a
		mustPick(t, s, a) // within the backoff: does not ask
		if lists, _ := f.counts(); lists != 2 {
			t.Fatalf("%d lists, want 2 (one fresh, one that failed)", lists)
		}
		if stale, backoff := staleOf(s, "w"); !stale || backoff != serviceBackoffMin {
			t.Fatalf("stale %v, backoff %v", stale, backoff)
		}
		time.Sleep(serviceBackoffMin)
		mustPick(t, s, a)
		if _, backoff := staleOf(s, "w"); backoff != 2*serviceBackoffMin {
			t.Fatalf("backoff after a second failure %v, want it doubled", backoff)
		}
		if _, _, err := s.pick(context.Background(), "never-seen", false); !errors.Is(err, ext.ErrDiscoveryUnavailable) {
			t.Fatalf("a service never learned, backend down: %v", err)
		}

		f.set(false, a, b)
		time.Sleep(2 * serviceBackoffMin)
		mustPick(t, s, a, b)
		if stale, _ := staleOf(s, "w"); stale {
			t.Fatal("still stale after the backend answered")
		}
		seen := map[ext.InstanceID]bool{}
		for range 4 {
			seen[mustPick(t, s, a, b)] = true
		}
		if !seen[b] {
			t.Fatal("the member that joined during the outage is not picked")
		}

		f.mu.Lock()
		f.refuse = errors.New("flaky: no such thing")
		f.mu.Unlock()
		time.Sleep(ServiceCacheTTL)
		if _, _, err := s.pick(context.Background(), "w", false); err == nil || errors.Is(err, ext.ErrDiscoveryUnavailable) {
			t.Fatalf("a backend's refusal was hidden: %v", err)
		}
	})
}

// TestWatchedServiceOutlivesItsBackend: the watch breaks and the backend
// is unavailable; the set keeps its members, the resolver watches again
// at once and then after a backoff that doubles up to its cap, never
// listing; once the backend is back the new watch's members replace the
// stale ones, and its changes apply.
func TestWatchedServiceOutlivesItsBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c := ext.NewInstanceID(), ext.NewInstanceID(), ext.NewInstanceID()
		f := newFlaky(a)
		s := newServices(serviceConfig{disc: flakyWatcher{f}}, nil)
		s.backoffMax = 4 * serviceBackoffMin
		defer s.close()
		mustPick(t, s, a)

		f.set(true, a)
		close(f.cut)
		synctest.Wait()
		if _, watches := f.counts(); watches != 2 {
			t.Fatalf("%d watches after the break, want the first and one at once", watches)
		}
		for i, wait := range []time.Duration{1, 2, 4, 4} {
			mustPick(t, s, a)
			time.Sleep(wait*serviceBackoffMin - time.Nanosecond)
			synctest.Wait()
			if _, watches := f.counts(); watches != 2+i {
				t.Fatalf("watched again before its backoff (%d watches)", watches)
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			if _, watches := f.counts(); watches != 3+i {
				t.Fatalf("try %d: %d watches, want %d", i, watches, 3+i)
			}
		}
		if stale, _ := staleOf(s, "w"); !stale {
			t.Fatal("not marked stale")
		}
		if lists, _ := f.counts(); lists != 0 {
			t.Fatalf("a watched set was listed %d times", lists)
		}

		f.cut = make(chan struct{}) // no watch is open: the next one uses it
		f.set(false, b)
		time.Sleep(4 * serviceBackoffMin)
		synctest.Wait()
		mustPick(t, s, b)
		if stale, _ := staleOf(s, "w"); stale {
			t.Fatal("still stale after a watch began")
		}
		f.feed <- ext.ServiceEvent{Kind: ext.ServiceAdded, IDs: []ext.InstanceID{c}}
		synctest.Wait()
		seen := map[ext.InstanceID]bool{}
		for range 4 {
			seen[mustPick(t, s, b, c)] = true
		}
		if !seen[c] {
			t.Fatal("a change after the rewatch did not apply")
		}
	})
}

// TestRewatchRefusedGoesBackToListing: a backend that refuses the new
// watch for another reason than unavailability ends the re-watching; the
// next call lists and sees what the backend says.
func TestRewatchRefusedGoesBackToListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := ext.NewInstanceID()
		f := newFlaky(a)
		s := newServices(serviceConfig{disc: flakyWatcher{f}}, nil)
		defer s.close()
		mustPick(t, s, a)
		refusal := errors.New("flaky: no watch route")
		f.mu.Lock()
		f.refuse = refusal
		f.mu.Unlock()
		close(f.cut)
		synctest.Wait()
		if _, _, err := s.pick(context.Background(), "w", false); !errors.Is(err, refusal) {
			t.Fatalf("after the refused rewatch: %v, want the backend's error from a listing", err)
		}
		if lists, _ := f.counts(); lists != 1 {
			t.Fatalf("%d lists, want 1", lists)
		}
	})
}
