package hub

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/velo-go/velo/hub/protocol"
)

// errStepTimeout: a store call or an extension step did not answer within
// step_timeout_ms. The hub stops waiting; the call may still finish.
var errStepTimeout = errors.New("hub: step timed out")

// panicError is a hook or store call that panicked.
type panicError struct {
	val   any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("hub: panic: %v", p.val) }

// step runs fn on a goroutine of its own and waits for it at most d (and
// not past ctx). A panic in fn comes back as a *panicError. When the wait
// gives up first, the answer fn gives later goes to late (if not nil), so
// a Staged value that arrives after its deadline is still aborted. A hook
// that never answers thus cannot hold the registration lock.
func step[T any](ctx context.Context, d time.Duration, fn func(context.Context) (T, error), late func(T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	type answer struct {
		v   T
		err error
	}
	ch := make(chan answer, 1)
	var mu sync.Mutex
	gaveUp := false
	go func() {
		defer cancel()
		var a answer
		func() {
			defer func() {
				if r := recover(); r != nil {
					a.err = &panicError{val: r, stack: debug.Stack()}
				}
			}()
			a.v, a.err = fn(ctx)
		}()
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			if late != nil {
				late(a.v, a.err)
			}
			return
		}
		ch <- a
	}()
	select {
	case a := <-ch:
		return a.v, a.err
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case a := <-ch: // it answered as the deadline passed
		return a.v, a.err
	default:
	}
	gaveUp = true
	var zero T
	return zero, fmt.Errorf("%w after %s", errStepTimeout, d)
}

// stepDo is step for a call with no value.
func stepDo(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
	_, err := step(ctx, d, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) }, nil)
	return err
}

// asProtocol turns a hook's or a step's error into the error a route
// answers: a *protocol.Error stays as it is, a timeout is unavailable,
// and anything else (a panic included) is internal, with a message that
// does not leak it.
func asProtocol(what string, err error) error {
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.Is(err, errStepTimeout):
		return protocol.Errorf(protocol.CodeUnavailable, "%s timed out", what)
	default:
		return protocol.Errorf(protocol.CodeInternal, "%s failed", what)
	}
}
