// Package msgrx is how velo's own packages (velo, streaming, events,
// rendezvous, queue/msgqueue, the benchmarks and robustness tests) reach
// the messenger entry points that are not part of its public API: posting
// on lanes with owned buffers, system handlers, slot-addressed replies,
// staging, hooks on peer loss and teardown, and a few counters.
//
// Each function here calls an unexported method of *messenger.Messenger
// through a function value that messenger's init installed (package hook);
// the value was asserted to its type once, when this package was
// initialized, so a call costs one indirect call: no assertion, lookup or
// allocation.
package msgrx

import (
	"reflect"

	"github.com/velo-go/velo/internal/msgrx/hook"
)

// Stager moves large request payloads by handle (package rendezvous
// implements it; SetStager installs it).
type Stager = hook.Stager

// typed returns v, one of hook.Fns, as F, and panics at init when
// messenger installed nothing or a function of another type: a mismatch
// between this package and messenger is a build mistake, met at once.
func typed[F any](name string, v any) F {
	f, ok := v.(F)
	if !ok {
		panic("msgrx: messenger installed no " + name + " of type " + reflect.TypeFor[F]().String())
	}
	return f
}
