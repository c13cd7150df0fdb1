package velo

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
)

// services resolves Service targets for one node: the instances of each
// service (kept by a watch where the backend has one, else listed again
// after ServiceCacheTTL), the state of each instance, and this node's own
// registrations. One mutex guards it all; it is held for map work only,
// never across a backend call.
type services struct {
	disc   ext.ServiceDiscovery
	picker Picker
	// probe asks a skipped instance whether it answers, once retryAfter
	// has passed since its failure (tests replace both).
	probe      func(ctx context.Context, id ext.InstanceID) error
	retryAfter time.Duration
	// backoffMin and backoffMax bound the wait between two tries of a
	// backend that is unavailable (tests shorten them).
	backoffMin, backoffMax time.Duration

	ctx    context.Context // ends the watches and probes at Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	sets  map[string]*serviceSet
	insts map[ext.InstanceID]*instance
	regs  []ext.Registration
}

// serviceSet is what is known of one service.
type serviceSet struct {
	ids      []ext.InstanceID // sorted, so that turns are stable
	listedAt time.Time        // zero while a watch keeps ids
	// watching: a watch keeps ids, or its goroutine is re-watching after
	// the stream broke (ids are then the last known).
	watching bool
	// stale: the backend was unavailable at the last try, and ids are
	// what it said before. retryAt is when a listed set may ask it again,
	// backoff the wait that led there.
	stale   bool
	retryAt time.Time
	backoff time.Duration
	turn    uint64
}

// instance is this node's view of one instance of some service.
type instance struct {
	outstanding int
	failedAt    time.Time // zero unless its last call failed on the connection
	probing     bool
}

func newServices(c serviceConfig, m *messenger.Messenger) *services {
	ctx, cancel := context.WithCancel(context.Background())
	s := &services{
		disc: c.disc, picker: c.picker, retryAfter: ServiceRetryAfter, ctx: ctx, cancel: cancel,
		backoffMin: serviceBackoffMin, backoffMax: serviceBackoffMax,
		sets: map[string]*serviceSet{}, insts: map[ext.InstanceID]*instance{},
	}
	if m != nil {
		s.probe = func(ctx context.Context, id ext.InstanceID) error {
			_, err := m.RemoteHandlers(ctx, id)
			return err
		}
	}
	return s
}

// ids returns the current instances of service, refreshing them first
// when nothing keeps them current. When the backend is unavailable
// (ext.ErrDiscoveryUnavailable) and the node has learned the instances
// before, it answers those, and asks the backend again after a backoff.
func (s *services) ids(ctx context.Context, service string) ([]ext.InstanceID, error) {
	s.mu.Lock()
	set := s.sets[service]
	if set != nil && (set.watching || time.Since(set.listedAt) < ServiceCacheTTL || time.Now().Before(set.retryAt)) {
		ids := set.ids
		s.mu.Unlock()
		return ids, nil
	}
	s.mu.Unlock()
	if w, ok := s.disc.(ext.ServiceWatcher); ok {
		if ids, ok := s.watch(ctx, w, service); ok {
			return ids, nil
		}
	}
	ids, err := s.disc.ListService(ctx, service)
	if err != nil {
		if ids, ok := s.keepStale(service, err); ok {
			return ids, nil
		}
		return nil, fmt.Errorf("velo: service %q: list instances: %w", service, err)
	}
	s.mu.Lock()
	set = s.setLocked(service, ids)
	set.listedAt = time.Now()
	set.fresh()
	ids = set.ids
	s.mu.Unlock()
	return ids, nil
}

// setLocked replaces the instances of service, forgets the state of those
// that left unmarked (one that comes back starts afresh), and returns the set.
func (s *services) setLocked(service string, ids []ext.InstanceID) *serviceSet {
	set := s.sets[service]
	if set == nil {
		set = &serviceSet{}
		s.sets[service] = set
	}
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b ext.InstanceID) int { return bytes.Compare(a[:], b[:]) })
	for _, old := range set.ids {
		// A listing can drop an instance and the next bring it back (a
		// backend that has not yet seen its owner die): one that failed
		// lately keeps its mark, so it is not picked afresh, and one with
		// calls in flight is kept for them, so that a call that then
		// fails on the connection still marks it.
		if in := s.insts[old]; !slices.Contains(ids, old) && (in == nil || (in.failedAt.IsZero() && in.outstanding == 0)) {
			delete(s.insts, old)
		}
	}
	set.ids = ids
	return set
}

// watch starts a watch of service and waits for its first event. It
// reports false when the backend would not watch; the caller lists.
func (s *services) watch(ctx context.Context, w ext.ServiceWatcher, service string) ([]ext.InstanceID, bool) {
	wctx, stop := context.WithCancel(s.ctx)
	ch, err := w.WatchService(wctx, service)
	if err != nil {
		stop()
		return nil, false
	}
	var first ext.ServiceEvent
	select {
	case first = <-ch:
	case <-ctx.Done():
	}
	if first.Kind != ext.ServiceInitial {
		stop()
		s.drain(ch)
		return nil, false
	}
	s.mu.Lock()
	set := s.sets[service]
	if set != nil && set.watching { // another caller's watch won
		ids := set.ids
		s.mu.Unlock()
		stop()
		s.drain(ch)
		return ids, true
	}
	set = s.setLocked(service, first.IDs)
	set.watching = true
	set.fresh()
	ids := set.ids
	s.mu.Unlock()
	s.wg.Add(1)
	go s.follow(service, w, ch, stop)
	return ids, true
}

// drain empties a watch that was stopped, so its sender can finish.
func (s *services) drain(ch <-chan ext.ServiceEvent) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for range ch {
		}
	}()
}

// follow applies a watch's changes until it ends, then watches again
// (see rewatch) and goes on; the set keeps its instances meanwhile. When
// the backend refuses to watch for another reason than being
// unavailable, the set goes back to being listed, and the next call
// lists (and reports what the backend says).
func (s *services) follow(service string, w ext.ServiceWatcher, ch <-chan ext.ServiceEvent, stop context.CancelFunc) {
	defer s.wg.Done()
	for {
		s.apply(service, ch)
		stop()
		var ok bool
		if ch, stop, ok = s.rewatch(service, w); !ok {
			break
		}
	}
	s.mu.Lock()
	set := s.sets[service]
	set.watching = false
	set.listedAt = time.Time{}
	s.mu.Unlock()
}

// apply applies the events of one watch stream until it ends.
func (s *services) apply(service string, ch <-chan ext.ServiceEvent) {
	for ev := range ch {
		s.mu.Lock()
		ids := slices.Clone(s.sets[service].ids)
		switch ev.Kind {
		case ext.ServiceInitial:
			ids = ev.IDs
		case ext.ServiceAdded:
			for _, id := range ev.IDs {
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		case ext.ServiceRemoved:
			ids = slices.DeleteFunc(ids, func(id ext.InstanceID) bool { return slices.Contains(ev.IDs, id) })
		}
		s.setLocked(service, ids)
		s.mu.Unlock()
	}
}

// register adds id to service and keeps the guard for close.
func (s *services) register(ctx context.Context, service string, id ext.InstanceID) error {
	var reg ext.Registration
	if r, ok := s.disc.(ext.ServiceRegistrar); ok {
		var err error
		if reg, err = r.RegisterServiceInstance(ctx, service, id); err != nil {
			return fmt.Errorf("velo: register service %q: %w", service, err)
		}
	} else {
		if err := s.disc.RegisterService(ctx, service, id); err != nil {
			return fmt.Errorf("velo: register service %q: %w", service, err)
		}
		reg = &plainService{d: s.disc, service: service, id: id}
	}
	s.mu.Lock()
	s.regs = append(s.regs, reg)
	s.mu.Unlock()
	return nil
}

// withdraw removes this node's registrations; Shutdown calls it before
// the drain.
func (s *services) withdraw(ctx context.Context) error {
	s.mu.Lock()
	regs := s.regs
	s.regs = nil
	s.mu.Unlock()
	var first error
	for _, r := range regs {
		if err := r.Unregister(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// close ends the watches and probes and waits for their goroutines.
func (s *services) close() {
	s.cancel()
	s.wg.Wait()
}

// plainService is the guard of a backend without ServiceRegistrar.
type plainService struct {
	d       ext.ServiceDiscovery
	service string
	id      ext.InstanceID
	once    sync.Once
}

func (p *plainService) Unregister(ctx context.Context) error {
	var err error
	p.once.Do(func() { err = p.d.UnregisterService(ctx, p.service, p.id) })
	return err
}
