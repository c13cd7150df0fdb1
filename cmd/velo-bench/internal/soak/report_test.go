package soak

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func sampleResult(lost uint64) *WorkloadResult {
	h := &Hist{}
	for i := 1; i <= 100; i++ {
		h.Add(time.Duration(i) * time.Millisecond)
	}
	v := Check(nil, nil, nil)
	v.Lost[KindUnary] = lost
	start := time.Now()
	r := &WorkloadResult{Name: "messenger", Verdict: v, Ops: 100, Items: 100, Bytes: mib, Latency: h,
		Errors: map[string]int64{"unary: timeout": 2}, FirstErrors: map[string]string{"unary: timeout": "velo: request timed out"},
		Elapsed: 10 * time.Second, Warmup: 3 * time.Second, runStart: start,
		Faults: []Window{{Kind: FaultDrop, From: start.Add(4 * time.Second), To: start.Add(4 * time.Second), Conns: 1}}}
	for i := 0; i < 10; i++ {
		r.Series = append(r.Series, Point{At: time.Duration(i) * time.Second, P50: time.Millisecond, P99: 9 * time.Millisecond, RSS: []int64{40 * mib, 42 * mib}})
	}
	r.Trends = []Trend{{Name: "child 0", Samples: 7, OK: true, RSSPerMin: mib}, {Name: "child 1", Samples: 7, OK: true}}
	return r
}

func TestSummaryShowsTheVerdict(t *testing.T) {
	tier, _ := TierByName("ci")
	var b bytes.Buffer
	WriteSummary(&b, tier, true, []*WorkloadResult{sampleResult(0)})
	out := b.String()
	for _, want := range []string{"lost", "p99", "RSS MiB/min", " ok", "unary: timeout ×2", "drop ×1", "+1.00"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	WriteSummary(&b, tier, true, []*WorkloadResult{sampleResult(3)})
	if !strings.Contains(b.String(), "FAIL") {
		t.Errorf("a run with loss does not say FAIL:\n%s", b.String())
	}
}

// The plot is well-formed SVG with a line for p50, p99 and each child's
// RSS, and a band for the fault.
func TestPlotIsSVG(t *testing.T) {
	var b bytes.Buffer
	if err := WritePlot(&b, []*WorkloadResult{sampleResult(0)}); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&b)
	lines, rects := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "polyline":
				lines++
			case "rect":
				rects++
			}
		}
	}
	if lines != 4 {
		t.Errorf("%d polylines, want 4 (p50, p99, two children's RSS)", lines)
	}
	if rects < 5 { // background, two frames, a fault band in each panel
		t.Errorf("%d rects", rects)
	}
}

// A child that dies before it speaks fails the run at once, by name.
func TestRunFailsWhenAChildDies(t *testing.T) {
	tier, _ := TierByName("test")
	_, err := Run(context.Background(), Config{Workload: "messenger", Transport: "tcp", Tier: tier, Children: 2,
		spawn: func([]string) *exec.Cmd { return exec.Command("false") }})
	if err == nil || !strings.Contains(err.Error(), "exited early") {
		t.Fatalf("run: %v, want a child that exited early", err)
	}
}
