package msgrx

import (
	"reflect"
	"testing"

	"github.com/velo-go/velo/internal/msgrx/hook"
)

// TestHooksInstalled checks that messenger's init filled every entry point
// of hook.Fns with a function, and that this package holds each one typed.
// (A missing or mistyped one already panics when this package initializes;
// the test names which.)
func TestHooksInstalled(t *testing.T) {
	v := reflect.ValueOf(hook.Fns)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		f := v.Field(i)
		if f.IsNil() {
			t.Errorf("hook.Fns.%s: not installed by messenger", name)
			continue
		}
		if f.Elem().Kind() != reflect.Func {
			t.Errorf("hook.Fns.%s: a %s, not a function", name, f.Elem().Type())
		}
	}
	typedVars := []any{postLaneOutcome, postLaneOwned, post, postLane, lanes,
		fireAndAwait, unaryAsyncView, unaryAsyncCall, abandon, handshake, acknowledge,
		peerInfoOf, instanceOf, resolveWorker, advertiseAddress,
		registerSystem, onPeerLost, watchUndelivered, onTeardown, stopped, setStager,
		stagingThreshold, withStagedFailure, withOp, responseTypeOf, lendAnswer,
		handshakes, unmatchedReplies}
	if len(typedVars) != v.NumField() {
		t.Errorf("msgrx types %d entry points, hook.Fns has %d", len(typedVars), v.NumField())
	}
	for i, f := range typedVars {
		if reflect.ValueOf(f).IsNil() {
			t.Errorf("typed entry point %d is nil", i)
		}
	}
}
