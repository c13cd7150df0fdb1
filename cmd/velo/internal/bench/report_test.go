package bench

import (
	"slices"
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
