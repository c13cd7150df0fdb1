package hub

import (
	"context"
	"errors"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// errWroteUnknown: neither the write nor its read-back answered, so the
// write may have applied (or may still apply, until a read-back answers).
var errWroteUnknown = errors.New("hub: the store write's outcome is unknown")

// write puts rec under step_timeout_ms with op as its op id. An
// Indeterminate answer or a timeout is resolved by the op id: a read-back
// that finds nothing is final, the write will not apply later. When the
// read-back does not answer either, write answers errWroteUnknown, with
// the incarnation only if the store's view already shows this write (its
// epoch): then it applied. A view that does not show it proves nothing
// (a remote store's view may lag), so the caller must not take that for
// "not applied".
func (h *Hub) write(owner ext.InstanceID, op store.OpID, rec store.Record, expect store.Incarnation) (store.Incarnation, error) {
	d := h.cfg.stepTimeout()
	inc, err := step(context.Background(), d, func(ctx context.Context) (store.Incarnation, error) {
		return h.st.Put(ctx, op, rec, expect)
	}, nil)
	switch {
	case err == nil:
		return inc, nil
	case errors.Is(err, store.ErrConflict):
		return 0, protocol.Errorf(protocol.CodeBusy, "the instance's entry changed during the registration: retry")
	case !errors.Is(err, store.ErrIndeterminate) && !errors.Is(err, errStepTimeout):
		return 0, protocol.Errorf(protocol.CodeUnavailable, "the store refused the write")
	}
	e, ok, rerr := step3(d, func(ctx context.Context) (store.Entry, bool, error) {
		return h.st.ResolveWrite(ctx, owner, op)
	})
	if rerr == nil {
		if ok {
			return e.Incarnation, nil
		}
		return 0, protocol.Errorf(protocol.CodeUnavailable, "the store write did not apply")
	}
	if e, ok := h.st.Get(owner); ok && e.Epoch == rec.Epoch {
		return e.Incarnation, errWroteUnknown
	}
	return 0, errWroteUnknown
}

// step3 is step for a call with two values.
func step3[A, B any](d time.Duration, fn func(context.Context) (A, B, error)) (A, B, error) {
	type ab struct {
		a A
		b B
	}
	v, err := step(context.Background(), d, func(ctx context.Context) (ab, error) {
		a, b, err := fn(ctx)
		return ab{a, b}, err
	}, nil)
	return v.a, v.b, err
}

// removeEntry removes owner's entry at inc under step_timeout_ms and says
// whether it is gone. A remove that times out counts as indeterminate:
// the store's view says whether it applied.
func (h *Hub) removeEntry(owner ext.InstanceID, inc store.Incarnation) bool {
	err := stepDo(context.Background(), h.cfg.stepTimeout(), func(ctx context.Context) error {
		return h.st.Remove(ctx, owner, inc)
	})
	if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		return true
	}
	e, ok := h.st.Get(owner)
	return !ok || e.Incarnation != inc
}
