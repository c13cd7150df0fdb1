// Package hookfn holds the one step that velo's hook packages share
// (internal/msgrx, internal/streamx): a package installs its unexported
// methods as function values in a hook table at init, and the hook
// package asserts each value to its type once, at its own init.
package hookfn

import "reflect"

// Typed returns v as F. It panics, naming owner and name, when v is nil
// or of another type: the installing package and the hook package disagree,
// which is a build mistake, met at init rather than at a call.
func Typed[F any](owner, name string, v any) F {
	f, ok := v.(F)
	if !ok {
		panic(owner + " installed no " + name + " of type " + reflect.TypeFor[F]().String())
	}
	return f
}
