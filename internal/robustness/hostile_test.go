package robustness_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/robustness/hostile"
)

// TestHostilePeers runs every attack of issue 20 between separate
// processes (hostile.Cases): a victim node and a legit peer streaming to
// or from it, attacked over raw connections and by rogue peers from this
// process. Each case asserts what the victim did and kept: every legit
// stream arrives whole and in order, the victim lives and answers, its
// live heap grows at most 1 MiB per hostile connection, and a counter
// names what it refused. The CPU bounds (5 µs per hostile frame, under 1%
// of a core 1 s after the attack) are speed, so `velo bench hostile`
// reports them rather than this test.
func TestHostilePeers(t *testing.T) {
	if testing.Short() {
		t.Skip("the hostile-peer suite starts node processes")
	}
	spawn := func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }
	bounds := hostile.DefaultBounds()
	bounds.CPUPerFrameUS, bounds.AnsweredCPUPerFrameUS, bounds.IdleCores = 0, 0, 0
	for _, c := range hostile.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			opts := hostile.Options{FuzzDuration: 3 * time.Second}
			if testing.Verbose() {
				opts.Log = testWriter{t}
			}
			res, err := hostile.Run(ctx, spawn, c, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(hostile.Summary(&res))
			for _, f := range res.Failures(bounds) {
				t.Error(f)
			}
		})
	}
}

// testWriter sends lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
