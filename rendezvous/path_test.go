package rendezvous_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/rendezvous/internal/rdmapath"
	"github.com/velo-go/velo/transport/tcp"
)

// pathTotal reads velo_rendezvous_rdma_path_total{path, reason}.
func pathTotal(reg *prometheus.Registry, path, reason string) float64 {
	return valueOf(reg, "velo_rendezvous_rdma_path_total", map[string]string{"path": path, "reason": reason})
}

// This build's path: each remote get counts not_configured on the
// consumer, each acquire no_offer on the owner, and nothing else moves.
func TestPathIsChunkedAndCounted(t *testing.T) {
	owner, om := newNode(t)
	a, am := newNode(t)
	if err := a.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := owner.RegisterPeer(a.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := owner.Rendezvous.RegisterData(make([]byte, 3*rendezvous.ChunkSize))
	for range 2 {
		b, lease, err := a.Rendezvous.Get(ctx, h)
		if err != nil || len(b) != 3*rendezvous.ChunkSize {
			t.Fatalf("get: %d bytes, %v", len(b), err)
		}
		if err := a.Rendezvous.Detach(ctx, h, lease); err != nil {
			t.Fatal(err)
		}
	}
	want := func(reg *prometheus.Registry, side, only string) {
		t.Helper()
		for _, r := range []string{"no_offer", "not_configured", "kill_switch", "not_pinned", "below_min", "draining", "decode_error", "pool_exhausted", "get_failed", "budget"} {
			w := 0.0
			if r == only {
				w = 2
			}
			if got := pathTotal(reg, "chunked", r); got != w {
				t.Errorf("%s: chunked/%s = %v, want %v", side, r, got, w)
			}
		}
		if got := pathTotal(reg, "rdma", "ok"); got != 0 {
			t.Errorf("%s: rdma/ok = %v", side, got)
		}
	}
	want(om, "owner", "no_offer")
	want(am, "consumer", "not_configured")
}

// An owner that answers Rdma to an acquire with no offer fails the get
// with ErrUnaskedRdma, as bad_answer, and the lease it named is detached;
// the consumer's own decision was counted once, as not_configured.
func TestUnaskedRdmaAnswer(t *testing.T) {
	n, reg := newNode(t)
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := messenger.New(context.Background(), messenger.Config{Transports: []ext.Transport{tr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	detached := make(chan uint64, 1)
	hs := []messenger.Handler{
		messenger.UnaryHandler(rendezvous.HandlerAcquire, func(*messenger.Context) ([]byte, error) {
			return json.Marshal(map[string]any{"Rdma": map[string]any{"lease_id": 42, "descriptor": []int{1, 1, 0}, "lease_timeout_ms": 30000}})
		}),
		messenger.FireHandler(rendezvous.HandlerDetach, func(c *messenger.Context) {
			var req struct {
				LeaseID uint64 `json:"lease_id"`
			}
			_ = json.Unmarshal(c.Payload, &req)
			detached <- req.LeaseID
		}),
	}
	for _, h := range hs {
		if err := msgrx.RegisterSystem(m, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.RegisterPeer(m.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterPeer(n.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = n.Rendezvous.Get(ctx, rendezvous.DataHandle{Hi: uint64(m.WorkerID()), Lo: 1})
	if !errors.Is(err, rdmapath.ErrUnaskedRdma) {
		t.Fatalf("get: %v, want ErrUnaskedRdma", err)
	}
	select {
	case id := <-detached:
		if id != 42 {
			t.Errorf("detached lease %d, want 42", id)
		}
	case <-ctx.Done():
		t.Fatal("the lease of the unasked Rdma answer was never detached")
	}
	if got := refused(reg, "get", "bad_answer"); got != 1 {
		t.Errorf("bad_answer = %v, want 1", got)
	}
	if got := pathTotal(reg, "chunked", "not_configured"); got != 1 {
		t.Errorf("consumer: not_configured = %v, want 1", got)
	}
	if got := pathTotal(reg, "rdma", "ok"); got != 0 {
		t.Errorf("consumer: rdma/ok = %v", got)
	}
}
