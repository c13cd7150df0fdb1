package rendezvous_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/rendezvous/internal/rdmapath"
)

// The path each side counted, as {reason: count} over every reason.
func paths(reg *prometheus.Registry) map[string]float64 {
	out := map[string]float64{}
	for _, r := range []string{"no_offer", "not_configured", "kill_switch", "not_pinned", "below_min", "draining", "decode_error", "pool_exhausted", "get_failed", "budget"} {
		if v := pathTotal(reg, "chunked", r); v != 0 {
			out[r] = v
		}
	}
	if v := pathTotal(reg, "rdma", "ok"); v != 0 {
		out["ok"] = v
	}
	return out
}

func wantPaths(t *testing.T, side string, reg *prometheus.Registry, want map[string]float64) {
	t.Helper()
	got := paths(reg)
	if len(got) != len(want) {
		t.Errorf("%s: path decisions %v, want %v", side, got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: path decisions %v, want %v", side, got, want)
			return
		}
	}
}

// A pinned slot above MinBytes moves by one GET, byte for byte; both
// sides count rdma/ok, the consumer times the GET, and no chunk is pulled.
func TestRDMAGetMovesThePinnedSlot(t *testing.T) {
	owner, consumer, om, cm, ob, cb := rdmaPair(t, velo.RdmaRendezvousConfig{}, velo.RdmaRendezvousConfig{})
	ctx := testCtx(t)
	want := pattern(3*rendezvous.ChunkSize + 17)
	h := owner.Rendezvous.RegisterDataPinned(want)
	clear(want[:10]) // the owner staged a copy
	want = pattern(3*rendezvous.ChunkSize + 17)
	if md, err := consumer.Rendezvous.Metadata(ctx, h); err != nil || !md.Pinned || md.TotalLen != uint64(len(want)) {
		t.Fatalf("metadata: %+v, %v", md, err)
	}
	b, lease, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("get: %d bytes, %v", len(b), err)
	}
	if cb.Gets() != 1 || ob.Gets() != 0 {
		t.Errorf("GETs run: consumer %d, owner %d; want 1, 0", cb.Gets(), ob.Gets())
	}
	if p := opCount(om, "pull"); p != 0 {
		t.Errorf("%v chunks pulled", p)
	}
	wantPaths(t, "owner", om, map[string]float64{"ok": 1})
	wantPaths(t, "consumer", cm, map[string]float64{"ok": 1})
	if n := histogramCount(cm, "velo_rendezvous_rdma_get_duration_seconds"); n != 1 {
		t.Errorf("GET durations observed: %d", n)
	}
	// The owner reads its own pinned slot from memory.
	if own, l, err := owner.Rendezvous.Get(ctx, h); err != nil || !bytes.Equal(own, want) {
		t.Fatalf("the owner's own get: %d bytes, %v", len(own), err)
	} else if err := owner.Rendezvous.Detach(ctx, h, l); err != nil {
		t.Fatal(err)
	}
	if err := consumer.Rendezvous.Release(ctx, h, lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the owner to free the slot", func() bool { _, n := owner.Rendezvous.HeldBytes(); return n == 0 })
	if reaped(om) != 0 {
		t.Error("a lease was reaped")
	}
}

// GetInto GETs straight into the caller's buffer.
func TestRDMAGetIntoCallerBuffer(t *testing.T) {
	owner, consumer, om, cm, _, cb := rdmaPair(t, velo.RdmaRendezvousConfig{}, velo.RdmaRendezvousConfig{})
	ctx := testCtx(t)
	want := pattern(1<<20 + 3)
	h := owner.Rendezvous.RegisterDataPinned(want)
	buf := make([]byte, len(want)+100)
	allocs := rendezvous.FetchAllocs()
	n, lease, err := consumer.Rendezvous.GetInto(ctx, h, buf)
	if err != nil || n != len(want) || !bytes.Equal(buf[:n], want) {
		t.Fatalf("get into: %d, %v", n, err)
	}
	if a := rendezvous.FetchAllocs() - allocs; a != 0 || cb.Gets() != 1 {
		t.Errorf("%d buffers allocated, %d GETs; want 0 and 1", a, cb.Gets())
	}
	wantPaths(t, "owner", om, map[string]float64{"ok": 1})
	wantPaths(t, "consumer", cm, map[string]float64{"ok": 1})
	_ = consumer.Rendezvous.Detach(ctx, h, lease)
	// Too small a buffer fails as on the chunked path, and runs no GET.
	if _, _, err := consumer.Rendezvous.GetInto(ctx, h, buf[:10]); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("a small buffer: %v", err)
	}
	if cb.Gets() != 1 {
		t.Errorf("%d GETs after the refused buffer", cb.Gets())
	}
}

// Below MinBytes the owner answers chunked (below_min) and the consumer,
// which offered, records nothing.
func TestRDMABelowMin(t *testing.T) {
	owner, consumer, om, cm, _, cb := rdmaPair(t, velo.RdmaRendezvousConfig{}, velo.RdmaRendezvousConfig{})
	ctx := testCtx(t)
	want := pattern(64<<10 - 1)
	h := owner.Rendezvous.RegisterDataPinned(want)
	b, _, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("get: %d bytes, %v", len(b), err)
	}
	if cb.Gets() != 0 {
		t.Error("a GET ran below MinBytes")
	}
	wantPaths(t, "owner", om, map[string]float64{"below_min": 1})
	wantPaths(t, "consumer", cm, map[string]float64{})
}

// The kill switch on either side alone turns the path off, and the bytes
// still arrive, chunked. The owner with it on stages in plain memory and
// counts kill_switch there and at the acquire; the consumer with it on
// makes no offer, so its owner counts no_offer.
func TestRDMAKillSwitch(t *testing.T) {
	for _, side := range []string{"owner", "consumer"} {
		t.Run(side, func(t *testing.T) {
			mk := func(who string) (*velo.Node, *prometheus.Registry, *rdmatest.Backend) {
				v := "0"
				if who == side {
					v = "On"
				}
				t.Setenv(rdmapath.KillSwitchEnv, v)
				return rdmaNode(t, velo.RdmaRendezvousConfig{})
			}
			owner, om, ob := mk("owner")
			consumer, cm, cb := mk("consumer")
			t.Setenv(rdmapath.KillSwitchEnv, "1") // read once at New: a later change does nothing
			introduce(t, owner, consumer)
			cb.SetReachable(owner.WorkerID(), true)
			ob.SetReachable(consumer.WorkerID(), true)
			ctx := testCtx(t)
			want := pattern(1 << 20)
			h := owner.Rendezvous.RegisterDataPinned(want)
			b, _, err := consumer.Rendezvous.Get(ctx, h)
			if err != nil || !bytes.Equal(b, want) {
				t.Fatalf("get: %d bytes, %v", len(b), err)
			}
			if cb.Gets() != 0 {
				t.Error("a GET ran")
			}
			if side == "owner" {
				wantPaths(t, "owner", om, map[string]float64{"kill_switch": 2})
				wantPaths(t, "consumer", cm, map[string]float64{})
			} else {
				wantPaths(t, "owner", om, map[string]float64{"no_offer": 1})
				wantPaths(t, "consumer", cm, map[string]float64{"kill_switch": 1})
			}
		})
	}
}
