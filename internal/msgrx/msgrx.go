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
	"github.com/velo-go/velo/internal/hookfn"
	"github.com/velo-go/velo/internal/msgrx/hook"
)

// Stager moves large request payloads by handle (package rendezvous
// implements it; SetStager installs it).
type Stager = hook.Stager

// Lender is a Stager that can lend a blocking call's payload instead of
// copying it (hook.Lender).
type Lender = hook.Lender

// Loan counts the readers of lent memory (hook.Loan).
type Loan = hook.Loan

// NewLoan returns a Loan holding its lender's reference.
func NewLoan() *Loan { return hook.NewLoan() }

// typed returns v, one of hook.Fns, as F (hookfn.Typed).
func typed[F any](name string, v any) F { return hookfn.Typed[F]("messenger", name, v) }
