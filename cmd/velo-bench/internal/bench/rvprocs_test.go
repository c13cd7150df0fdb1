package bench

import (
	"errors"
	"testing"
)

// The Final line of ucx_perftest (1.13) gives the overall bandwidth in
// its seventh field.
func TestParsePerftest(t *testing.T) {
	out := `+--------------+--------------+------------------------------+---------------------+-----------------------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
Final:                    20   5369.451  5497.503  5497.503    11641.65   11641.65         182         182
`
	bw, err := parsePerftest(out)
	if err != nil || bw != 11641.65 {
		t.Fatalf("parsePerftest = %v, %v; want 11641.65", bw, err)
	}
	if _, err := parsePerftest("no table\n"); err == nil {
		t.Fatal("no Final line parsed")
	}
}

// A child refuses an unknown role, and one that is told to exit at once
// exits cleanly.
func TestRendezvousChildRoles(t *testing.T) {
	if err := RendezvousChild("janitor", nil, nil); err == nil {
		t.Fatal("an unknown role was accepted")
	}
	if err := RendezvousChild("owner", stringsReader(`{"op":"exit"}`+"\n"), discard{}); err != nil {
		t.Fatal(err)
	}
}

// Without the ucx tag the RDMA arms say how to get them.
func TestRendezvousRDMANeedsTheTag(t *testing.T) {
	if !ucxBuilt {
		if _, err := newRVChild(1, false); !errors.Is(err, errNoUCX) {
			t.Fatalf("newRVChild without UCX: %v, want errNoUCX", err)
		}
	}
}
