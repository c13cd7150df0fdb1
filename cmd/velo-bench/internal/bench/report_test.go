package bench

import (
	"slices"
	"strconv"
	"testing"
)

func TestRotatedPutsEveryArmFirstOnce(t *testing.T) {
	arms := []string{"raw", "velo", "grpc"}
	firsts := map[string]int{}
	for rep := 0; rep < 2*len(arms); rep++ {
		got := rotated(arms, rep)
		if len(got) != len(arms) {
			t.Fatalf("rep %d: %v", rep, got)
		}
		sorted := slices.Sorted(slices.Values(got))
		if !slices.Equal(sorted, []string{"grpc", "raw", "velo"}) {
			t.Fatalf("rep %d: %v is not a permutation of %v", rep, got, arms)
		}
		firsts[got[0]]++
	}
	for _, a := range arms {
		if firsts[a] != 2 {
			t.Fatalf("arm %s ran first %d times in %d reps, want 2", a, firsts[a], 2*len(arms))
		}
	}
	if !slices.Equal(arms, []string{"raw", "velo", "grpc"}) {
		t.Fatalf("rotated changed its argument: %v", arms)
	}
	if rotated([]string(nil), 3) != nil {
		t.Fatal("rotated of no arms should be empty")
	}
}

func TestTxBudgetHeadlineIsOverTheFasterRung(t *testing.T) {
	var r Report
	p := map[string]any{"transport": "tcp"}
	// Rep 0: L1 is faster; rep 1: L0 is.
	for _, s := range []struct{ l0, l1, l3 float64 }{{20, 10, 15}, {8, 12, 16}} {
		r.Add("tx-budget", "L0", "one_way_p50_ns", "ns", s.l0, p)
		r.Add("tx-budget", "L1", "one_way_p50_ns", "ns", s.l1, p)
		r.Add("tx-budget", "L3", "one_way_p50_ns", "ns", s.l3, p)
	}
	l0, _ := r.Find("tx-budget", "L0", "one_way_p50_ns", p)
	l1, _ := r.Find("tx-budget", "L1", "one_way_p50_ns", p)
	l3, _ := r.Find("tx-budget", "L3", "one_way_p50_ns", p)
	r.Ratio("tx-budget", TxBudgetHeadline, "one_way_p50_ratio", l3, fasterPerRep(l0, l1), p)
	f, ok := r.Find("tx-budget", TxBudgetHeadline, "one_way_p50_ratio", p)
	if !ok || !slices.Equal(f.Samples, []float64{1.5, 2}) {
		t.Fatalf("headline samples %v (found %v), want [1.5 2]", f.Samples, ok)
	}
}

// TestRoundKeepsSmallRatios checks the JSON rounding: whole units from
// 100, thousandths from 1, four significant digits below 1.
func TestRoundKeepsSmallRatios(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{1234.5, 1235}, {12.34567, 12.346}, {1, 1}, {0, 0},
		{0.0020394, 0.002039}, {0.031818, 0.03182}, {0.5, 0.5}, {-0.00012346, -0.0001235},
	} {
		if got := round(c.in); got != c.want {
			t.Errorf("round(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// countingWriter counts the Write calls made on it.
type countingWriter struct {
	writes, bytes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	w.bytes += len(p)
	return len(p), nil
}

// TestWriteTableWritesOnce checks that the table goes out in one write
// per tableBuffer of output, not one per cell: on os.Stdout each Write is
// a system call, and a bench run's `strace -c` counts them.
func TestWriteTableWritesOnce(t *testing.T) {
	var r Report
	params := map[string]any{"a": 1, "b": "x"}
	for i := range 300 {
		r.Add("h", "arm", "metric_"+strconv.Itoa(i), "us", float64(i), params)
	}
	var w countingWriter
	if err := r.WriteTable(&w); err != nil {
		t.Fatal(err)
	}
	if want := w.bytes/tableBuffer + 1; w.writes > want {
		t.Errorf("%d writes for %d bytes, want at most %d", w.writes, w.bytes, want)
	}
	if w.bytes < 300*20 {
		t.Errorf("only %d bytes for 300 rows", w.bytes)
	}
}
