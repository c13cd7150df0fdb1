package tour

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// The tour's nodes and streams end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTour runs every step between two nodes registered by hand; each step
// checks its own outcome and fails the run when it is wrong. The handlers
// keep process-wide state, so this is the only run in this test binary.
func TestTour(t *testing.T) {
	var out bytes.Buffer
	if err := Run(&out, nil); err != nil {
		t.Fatalf("%v\noutput so far:\n%s", err, out.String())
	}
	for i := 1; i <= 10; i++ {
		if !strings.Contains(out.String(), fmt.Sprintf("\n%d. ", i)) {
			t.Fatalf("step %d missing from the output:\n%s", i, out.String())
		}
	}
}
