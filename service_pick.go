package velo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/messenger"
)

// pick chooses a live instance of service. With count, the call is
// counted as outstanding until finish, which also records whether the
// instance's connection failed.
func (s *services) pick(ctx context.Context, service string, count bool) (ext.InstanceID, func(error), error) {
	ids, err := s.ids(ctx, service)
	if err != nil {
		return ext.InstanceID{}, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.sets[service]
	id, ok := s.chooseLocked(set, ids)
	if !ok {
		if len(ids) == 0 {
			return ext.InstanceID{}, nil, fmt.Errorf("%w %q: none registered", ErrNoInstance, service)
		}
		return ext.InstanceID{}, nil, fmt.Errorf("%w %q: all %d instances failed their last call", ErrNoInstance, service, len(ids))
	}
	if !count {
		return id, noFinish, nil
	}
	s.instLocked(id).outstanding++
	var once sync.Once
	started := time.Now()
	return id, func(err error) { once.Do(func() { s.finish(id, started, err) }) }, nil
}

// chooseLocked applies the picker to the instances that are not skipped,
// and starts a probe of each skipped one whose wait is over.
func (s *services) chooseLocked(set *serviceSet, ids []ext.InstanceID) (ext.InstanceID, bool) {
	var best ext.InstanceID
	found, bestLoad := false, 0
	turn := set.turn
	set.turn++
	for i := range ids {
		id := ids[(int(turn%uint64(len(ids)))+i)%len(ids)]
		in := s.insts[id]
		if in != nil && !in.failedAt.IsZero() {
			s.maybeProbeLocked(id, in)
			continue
		}
		load := 0
		if in != nil {
			load = in.outstanding
		}
		if !found || (s.picker == LeastOutstanding && load < bestLoad) {
			best, bestLoad, found = id, load, true
			if s.picker == RoundRobin {
				break
			}
		}
	}
	return best, found
}

func (s *services) instLocked(id ext.InstanceID) *instance {
	in := s.insts[id]
	if in == nil {
		in = &instance{}
		s.insts[id] = in
	}
	return in
}

// finish ends one counted call on id that started at started.
func (s *services) finish(id ext.InstanceID, started time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.insts[id]
	if in == nil {
		return // it left the service meanwhile
	}
	if in.outstanding > 0 {
		in.outstanding--
	}
	switch {
	case connectionLost(err):
		in.failedAt = time.Now()
	case answered(err) && started.After(in.failedAt):
		// Only a call that went out after the failure proves the instance
		// is back: one that started before it may have been answered
		// before the instance died, and finish late.
		in.failedAt = time.Time{}
	}
}

// connectionLost reports errors that say the instance cannot be reached,
// not that it refused or failed the request.
func connectionLost(err error) bool {
	for _, e := range []error{
		messenger.ErrPeerUnreachable, messenger.ErrPeerRestarted, messenger.ErrPeerNotRegistered,
		ext.ErrConnectionClosed, ext.ErrPeerShutdown, ext.ErrPeerNotFound, messenger.ErrShuttingDown,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// answered reports an outcome that only a live instance gives: success or
// its handler's own error.
func answered(err error) bool {
	var re *msgerr.RemoteError
	return err == nil || errors.As(err, &re)
}

// maybeProbeLocked asks a skipped instance, once ServiceRetryAfter has
// passed, whether it answers; only then is it picked again. A user's call
// never serves as the test.
func (s *services) maybeProbeLocked(id ext.InstanceID, in *instance) {
	if in.probing || time.Since(in.failedAt) < s.retryAfter || s.probe == nil || s.ctx.Err() != nil {
		return
	}
	in.probing = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, time.Second)
		err := s.probe(ctx, id)
		cancel()
		s.mu.Lock()
		defer s.mu.Unlock()
		if in := s.insts[id]; in != nil {
			in.probing = false
			if err == nil {
				in.failedAt = time.Time{}
			} else {
				in.failedAt = time.Now()
			}
		}
	}()
}
