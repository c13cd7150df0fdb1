package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/velo-go/velo"
	"github.com/velo-go/velo/rendezvous"
)

// errNoUCX: the RDMA arms need a velo-bench built with the ucx tag.
var errNoUCX = errors.New("this velo-bench was built without UCX: build it with `go build -tags ucx ./cmd/velo-bench` (needs libucx-dev)")

// rvChild is one process of a --procs rendezvous run.
type rvChild struct {
	node *velo.Node
	reg  *prometheus.Registry
	buf  []byte // the consumer's destination, reused across transfers
}

func newRVChild(minBytes int, alloc bool) (*rvChild, error) {
	reg := prometheus.NewRegistry()
	n, err := rvNode(context.Background(), reg, minBytes, alloc)
	if err != nil {
		return nil, err
	}
	return &rvChild{node: n, reg: reg}, nil
}

func (c *rvChild) close() { shutdownWithin(c.node, 10*time.Second) }

// rvPattern is the payload's byte i: it does not repeat at the chunk
// size, so a chunk at the wrong offset fails the check.
func rvPattern(i int) byte { return byte(i*31 + i>>8) }

func (c *rvChild) serve(m rvMsg) (rvMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	switch m.Op {
	case "peer":
		p, err := peerFrom(m.Peer)
		if err == nil {
			err = c.node.RegisterPeer(p)
		}
		return rvMsg{}, err
	case "cpu":
		return rvMsg{CPUNS: int64(processCPU())}, nil
	case "stage":
		payload := make([]byte, m.Size)
		for i := range payload {
			payload[i] = rvPattern(i)
		}
		h := c.node.Rendezvous.RegisterDataPinned(payload)
		md, err := c.node.Rendezvous.Metadata(ctx, h)
		return rvMsg{Handle: h.String(), Pinned: md.Pinned}, err
	case "drop":
		h, err := rendezvous.ParseHandle(m.Handle)
		if err == nil {
			_, lease, gerr := c.node.Rendezvous.Get(ctx, h)
			if err = gerr; err == nil {
				err = c.node.Rendezvous.Release(ctx, h, lease)
			}
		}
		return rvMsg{}, err
	case "get":
		return c.get(ctx, m)
	}
	return rvMsg{}, fmt.Errorf("unknown op %q", m.Op)
}

// get moves the payload m.Iters times into one reused buffer and checks
// every byte of each transfer outside the timed section.
func (c *rvChild) get(ctx context.Context, m rvMsg) (rvMsg, error) {
	h, err := rendezvous.ParseHandle(m.Handle)
	if err != nil {
		return rvMsg{}, err
	}
	if len(c.buf) != m.Size {
		c.buf = make([]byte, m.Size)
	}
	p0 := c.paths()
	var wall, cpu time.Duration
	for i := 0; i < m.Iters; i++ {
		clear(c.buf)
		cpu0, t0 := processCPU(), time.Now()
		n, lease, err := c.node.Rendezvous.GetInto(ctx, h, c.buf)
		wall += time.Since(t0)
		cpu += processCPU() - cpu0
		if err != nil {
			return rvMsg{}, err
		}
		if n != m.Size {
			return rvMsg{}, fmt.Errorf("got %d bytes, want %d", n, m.Size)
		}
		for j, b := range c.buf {
			if b != rvPattern(j) {
				return rvMsg{}, fmt.Errorf("transfer %d: byte %d is %#x, want %#x", i, j, b, rvPattern(j))
			}
		}
		if err := c.node.Rendezvous.Detach(ctx, h, lease); err != nil {
			return rvMsg{}, err
		}
	}
	p1 := c.paths()
	d := map[string]int{}
	for k, v := range p1 {
		if v -= p0[k]; v != 0 {
			d[k] = v
		}
	}
	return rvMsg{WallNS: int64(wall), CPUNS: int64(cpu), Paths: d}, nil
}

// paths reads this node's velo_rendezvous_rdma_path_total by path: the
// consumer records ok when a GET completes and a chunked reason when it
// pulls chunks.
func (c *rvChild) paths() map[string]int { return rvPaths(c.reg) }

// rvPaths reads velo_rendezvous_rdma_path_total from reg by path.
func rvPaths(reg *prometheus.Registry) map[string]int {
	out := map[string]int{}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "velo_rendezvous_rdma_path_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "path" {
					out[l.GetValue()] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}
