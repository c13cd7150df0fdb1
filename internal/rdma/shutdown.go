package rdma

import (
	"context"
	"errors"
	"fmt"
)

// Shutdown runs the sweep, in the book's order:
//
//  1. Gate: new registrations, allocations and stagings are refused
//     (ErrShutdown, RdmaDraining) from here on; Draining reports true.
//  2. Drain: wait for registrations and allocations in progress, then for
//     every region's in-flight work (stagings not released, copies),
//     bounded by ctx and Config.ShutdownTimeout. On expiry it warns and
//     forces: the unmaps go ahead under the work still in flight.
//  3. Deregister: unmap every region and arena, and close the
//     Deregistered of every region whose unmap the backend confirmed.
//
// Pool memory still held by a Staging or a PinnedBuf stays valid (it is
// freed when released); only its registration ends. Release and Unregister
// are safe during and after Shutdown.
//
// Shutdown is idempotent: a later call waits for the first (or for its
// own ctx) and returns the same error. The error joins a forced drain
// (matching ctx's error or context.DeadlineExceeded) and every unmap the
// backend refused; nil means everything drained and unmapped.
func (r *Registry) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if r.shut != nil {
		ch := r.shut
		r.mu.Unlock()
		select {
		case <-ch:
			return r.shutErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.shut = make(chan struct{})
	r.draining = true
	r.flight.close()
	for g := range r.regions {
		g.flight.close()
	}
	r.stopReclaimLocked()
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, r.cfg.ShutdownTimeout)
	defer cancel()
	errs := []error{r.drain(ctx)}
	close(r.forced)
	errs = append(errs, r.sweep(ctx)...)
	r.bg.Wait()
	r.shutErr = errors.Join(errs...)
	close(r.shut)
	return r.shutErr
}

// drain is step 2.
func (r *Registry) drain(ctx context.Context) error {
	done := r.flight.wait(ctx)
	r.mu.Lock()
	regions := make([]*RegionGuard, 0, len(r.regions))
	for g := range r.regions {
		regions = append(regions, g)
	}
	r.mu.Unlock()
	for _, g := range regions {
		if !done {
			break
		}
		select {
		case <-g.flight.zeroCh:
		case <-g.done: // unregistered meanwhile, after its own drain
		case <-ctx.Done():
			done = false
		}
	}
	if done {
		return nil
	}
	r.log.Warn("rdma: shutdown drain ran out of time; unmapping under work in flight")
	return fmt.Errorf("rdma: shutdown drain cut short: %w", ctx.Err())
}

// sweep is step 3.
func (r *Registry) sweep(ctx context.Context) []error {
	r.mu.Lock()
	r.swept = true
	var regions []*RegionGuard
	var arenas []*arena
	var others []chan struct{} // retirements already under way elsewhere
	for g := range r.regions {
		if g.state == stateLive {
			g.state = stateUnmapping
			regions = append(regions, g)
		} else {
			others = append(others, g.done)
		}
	}
	for a := range r.arenas {
		if r.claimArenaLocked(a) {
			arenas = append(arenas, a)
		} else {
			others = append(others, a.done)
		}
	}
	r.mu.Unlock()

	var errs []error
	for _, g := range regions {
		res := DrainTimedOut
		select {
		case <-g.flight.zeroCh:
			res = Drained
		default:
		}
		if err := bounded(ctx, func() error { return r.retireRegion(g, res) }); err != nil {
			errs = append(errs, err)
		}
	}
	for _, a := range arenas {
		if err := bounded(ctx, func() error { return r.retireArena(a) }); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ch := range others {
		select {
		case <-ch:
		case <-ctx.Done():
			return append(errs, fmt.Errorf("rdma: shutdown: an unmap begun elsewhere is still running: %w", ctx.Err()))
		}
	}
	return errs
}

// bounded runs one unmap, waiting for it no longer than ctx. A backend's
// unmap can wait for its own GETs into the memory (the UCX binding does),
// and a GET to a peer that died can stay unanswered until the transport
// closes, which comes after the sweep: so the sweep moves on, and the
// unmap finishes in the background when the transport's close answers the
// GET.
func bounded(ctx context.Context, unmap func() error) error {
	done := make(chan error, 1)
	go func() { done <- unmap() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("rdma: shutdown: an unmap is still waiting (a GET into its memory is outstanding); it finishes when the transport closes: %w", ctx.Err())
	}
}

// AfterBackendClose settles what the sweep could not. The node calls it
// once Shutdown has returned and the backend's transport is torn down,
// which ends every registration the backend still held: registrations
// whose unmap the backend refused are then released (arena pages freed
// once nothing holds them, owned buffers unpinned) and their regions'
// Deregistered closed. It reports false, and does nothing, if Shutdown
// has not returned.
func (r *Registry) AfterBackendClose() bool {
	r.mu.Lock()
	if r.shut == nil {
		r.mu.Unlock()
		return false
	}
	select {
	case <-r.shut:
	default:
		r.mu.Unlock()
		return false
	}
	arenas, regions := r.leakedArenas, r.leakedRegions
	r.leakedArenas, r.leakedRegions = nil, nil
	var free []*arena
	for _, a := range arenas {
		r.accountLocked(-a.pinned, -1)
		a.unmapOK = true
		if a.claimFreeLocked() {
			free = append(free, a)
		}
	}
	for _, g := range regions {
		r.accountLocked(-g.pinned, -1)
	}
	r.mu.Unlock()
	for _, a := range free {
		r.munmap(a)
	}
	for _, g := range regions {
		if g.pin != nil {
			g.pin.Unpin()
		}
		g.closeDereg()
	}
	return true
}
