//go:build ucx

package velo_test

import (
	"context"
	"sync"
	"testing"
	"time"

	ucxtls "github.com/velo-go/velo/internal/ucx"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/transport/tcp"
	"github.com/velo-go/velo/transport/ucx"
)

// Helpers of the end-to-end tests of the RDMA path over real UCX: nodes
// with TCP for the control plane and UCX beside it, and backends wrapped
// to break or watch what the real one does.

// newUCX is a UCX transport over UCX_TLS, tcp when the environment names
// none. Over shared memory only, its endpoints have no peer error
// handling (UCX 1.13 creates none there): TCP then sees a dead peer.
func newUCX() (*ucx.Transport, error) { return ucx.New(ucx.WithTLS("tcp")) }

// sharedMemoryOnly reports whether the environment's UCX_TLS names only
// shared memory, where UCX 1.13 never fails a GET to a dead owner.
func sharedMemoryOnly() bool { return ucxtls.EnvSharedMemoryOnly() }

// ucxRDMA is the UCX transport with another RDMA backend: the real one
// wrapped. It is still the UCX transport for messages.
type ucxRDMA struct {
	*ucx.Transport
	be rdma.Backend
}

func (t ucxRDMA) RDMA() rdma.Backend { return t.be }

// rdmaNode is a node with TCP and the RDMA path over u, and its metrics.
func rdmaNode(t *testing.T, u velo.RDMATransport) (*velo.Node, *prometheus.Registry) {
	t.Helper()
	n, reg, err := newRDMANode(u, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n, reg
}

func newRDMANode(u velo.RDMATransport, firstArena int64) (*velo.Node, *prometheus.Registry, error) {
	tr, err := tcp.New()
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	met, err := metrics.Register(reg)
	if err != nil {
		return nil, nil, err
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithMetrics(met),
		velo.WithRDMA(u, velo.RdmaConfig{Pool: velo.RdmaPoolConfig{InitialArenaBytes: firstArena}}))
	return n, reg, err
}

// knowEachOther registers each node with the other.
func knowEachOther(t *testing.T, a, b *velo.Node) {
	t.Helper()
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		t.Fatal(err)
	}
}

// path reads velo_rendezvous_rdma_path_total for one reason.
func path(reg *prometheus.Registry, reason metrics.RdmaPathReason) float64 {
	return counter(reg, "velo_rendezvous_rdma_path_total", map[string]string{"path": reason.Path(), "reason": reason.String()})
}

// watched is a backend that says when each GET starts and what the real
// backend answered it.
type watched struct {
	rdma.Backend
	started chan struct{} // one per GET, sent as it is handed to UCX
	mu      sync.Mutex
	results []error
	done    chan error // each GET's answer, as it comes
	// landed, when not nil, gets one send per GET whose first byte of
	// destination turned non-zero before the backend answered: UCX is
	// writing it, so the GET is running. (The test's payload has no zero
	// bytes and the pool's fresh memory is all zeros.)
	landed chan struct{}
}

// watchFirstByte waits for dst[0] to change, checking every 100 µs, until
// the backend answers. UCX writes dst from C, outside the race detector's
// view.
func (w *watched) watchFirstByte(dst []byte, answered <-chan struct{}) {
	t := time.NewTicker(100 * time.Microsecond)
	defer t.Stop()
	for dst[0] == 0 {
		select {
		case <-answered:
			return
		case <-t.C:
		}
	}
	w.landed <- struct{}{}
}

func watch(be rdma.Backend) *watched {
	return &watched{Backend: be, started: make(chan struct{}, 16), done: make(chan error, 16)}
}

func (w *watched) Get(ctx context.Context, owner ext.WorkerID, addr uint64, rkey []byte, dst []byte) error {
	w.started <- struct{}{}
	answered := make(chan struct{})
	if w.landed != nil && len(dst) > 0 {
		go w.watchFirstByte(dst, answered)
	}
	err := w.Backend.Get(ctx, owner, addr, rkey, dst)
	close(answered)
	w.mu.Lock()
	w.results = append(w.results, err)
	w.mu.Unlock()
	w.done <- err
	return err
}

// answers are the real backend's answers so far, one per GET.
func (w *watched) answers() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]error(nil), w.results...)
}
