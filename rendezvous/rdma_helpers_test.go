package rendezvous_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/rendezvous"
)

// fakeRDMA is an RDMA transport that is only its backend: the messages
// go over TCP, the GETs through the in-process fake.
type fakeRDMA struct{ be *rdmatest.Backend }

func (f fakeRDMA) RDMA() rdma.Backend { return f.be }

// testPool keeps the fake's arenas small: each one is real memory.
var testPool = velo.RdmaPoolConfig{InitialArenaBytes: 8 << 20, MaxArenaBytes: 32 << 20, DedicatedArenaMin: 16 << 20, RegisteredBytesBudget: 64 << 20}

// rdmaNode is a node over TCP with the RDMA path over a fake backend.
func rdmaNode(t testing.TB, rc velo.RdmaRendezvousConfig, opts ...velo.Option) (*velo.Node, *prometheus.Registry, *rdmatest.Backend) {
	t.Helper()
	be := rdmatest.New()
	n, reg := newNode(t, append(opts, velo.WithRDMA(fakeRDMA{be}, velo.RdmaConfig{Rendezvous: rc, Pool: testPool}))...)
	be.SetSelf(n.WorkerID())
	return n, reg, be
}

// rdmaPair is an owner and a consumer that know each other on TCP and on
// the fake backend's "transport".
func rdmaPair(t testing.TB, orc, crc velo.RdmaRendezvousConfig) (owner, consumer *velo.Node, om, cm *prometheus.Registry, ob, cb *rdmatest.Backend) {
	t.Helper()
	owner, om, ob = rdmaNode(t, orc)
	consumer, cm, cb = rdmaNode(t, crc)
	introduce(t, owner, consumer)
	cb.SetReachable(owner.WorkerID(), true)
	ob.SetReachable(consumer.WorkerID(), true)
	return
}

func introduce(t testing.TB, a, b *velo.Node) {
	t.Helper()
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		t.Fatal(err)
	}
}

// opCount reads velo_rendezvous_operations_total{operation, outcome="success"}.
func opCount(reg *prometheus.Registry, op string) float64 {
	return valueOf(reg, "velo_rendezvous_operations_total", map[string]string{"operation": op, "outcome": "success"})
}

// histogramCount is the sample count of an unlabelled histogram.
func histogramCount(reg *prometheus.Registry, family string) uint64 {
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == family && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func reaped(reg *prometheus.Registry) float64 {
	return valueOf(reg, "velo_rendezvous_rdma_leases_reaped_total", nil)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// hostileOwner is a bare messenger that answers _rv_acquire as answer
// says and keeps every acquire body it got; detaches are swallowed.
type hostileOwner struct {
	m      *messenger.Messenger
	mu     sync.Mutex
	bodies []string
}

func newHostileOwner(t *testing.T, answer func(n int) any) *hostileOwner {
	t.Helper()
	m := bareMessenger(t)
	h := &hostileOwner{m: m}
	hs := []messenger.Handler{
		messenger.UnaryHandler(rendezvous.HandlerAcquire, func(c *messenger.Context) ([]byte, error) {
			h.mu.Lock()
			h.bodies = append(h.bodies, string(c.Payload))
			n := len(h.bodies)
			h.mu.Unlock()
			return json.Marshal(answer(n))
		}),
		messenger.FireHandler(rendezvous.HandlerDetach, func(*messenger.Context) {}),
		messenger.FireHandler(rendezvous.HandlerRelease, func(*messenger.Context) {}),
	}
	for _, hd := range hs {
		if err := msgrx.RegisterSystem(m, hd); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h *hostileOwner) acquires() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.bodies...)
}

// rdmaAnswer is an Rdma acquire answer in the reference's JSON.
func rdmaAnswer(lease uint64, desc []byte, timeoutMS uint64) any {
	nums := make([]int, len(desc))
	for i, b := range desc {
		nums[i] = int(b)
	}
	return map[string]any{"Rdma": map[string]any{"lease_id": lease, "descriptor": nums, "lease_timeout_ms": timeoutMS}}
}

// emptyReady is a Ready answer for a payload of no bytes.
var emptyReady = map[string]any{"Ready": map[string]any{"lease_id": 9, "transfer_id": 10, "total_len": 0, "chunk_size": rendezvous.ChunkSize, "chunk_count": 0}}
