package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// Every harness starts nodes, servers and goroutines of its own; a run that
// leaves any behind would skew the next arm's figures.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
