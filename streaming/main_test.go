package streaming

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// An illegal lifecycle move is a bug: in tests it panics, with the
	// stack of the code that made it, instead of being logged.
	onIllegalTransition = func(kind, from, to string) {
		panic(fmt.Sprintf("illegal %s lifecycle move %s -> %s", kind, from, to))
	}
	goleak.VerifyTestMain(m)
}
