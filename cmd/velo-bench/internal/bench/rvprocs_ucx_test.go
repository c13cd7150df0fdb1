//go:build ucx

package bench

import (
	"os"
	"testing"
)

// The two-process harness end to end over UCX (UCX_TLS from the
// environment; CI runs tcp): the rdma arm's transfers all take the RDMA
// path on the consumer (RendezvousProcs fails otherwise), the chunked
// arm's none, and every transfer's bytes are checked by the consumer.
func TestRendezvousProcsOverUCX(t *testing.T) {
	r := &Report{}
	err := RendezvousProcs(RendezvousProcsConfig{
		Sizes: []int{1 << 20}, Bytes: 3 << 20, Reps: 1, Arms: []string{"rdma", "chunked"},
	}, r)
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]any{"payload_bytes": 1 << 20, "transfers": 3, "procs": true, "ucx_tls": os.Getenv("UCX_TLS")}
	for _, arm := range []string{"rdma", "chunked"} {
		if _, ok := r.Find(rendezvousHarness, arm, "throughput_mib_per_s", params); !ok {
			t.Errorf("no throughput for the %s arm", arm)
		}
	}
}
