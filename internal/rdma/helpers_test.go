package rdma_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// small is a pool sized for tests: 1 MiB arenas growing to 8 MiB,
// dedicated arenas from 4 MiB, a 64 MiB budget.
func small() rdma.Config {
	return rdma.Config{
		Pool: rdma.PoolConfig{
			InitialArenaBytes: 1 * mib, MaxArenaBytes: 8 * mib,
			DedicatedArenaMin: 4 * mib, RegisteredBytesBudget: 64 * mib,
		},
		Log: quietLog(),
	}
}

// quietLog drops the registry's warnings, which some tests provoke.
func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newFake() *rdmatest.Backend { return rdmatest.New() }

// newReg builds a registry over a fresh fake, shut down at cleanup.
func newReg(t *testing.T, cfg rdma.Config) (*rdma.Registry, *rdmatest.Backend) {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = quietLog()
	}
	b := rdmatest.New()
	r := rdma.NewRegistry(b, cfg, nil)
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return r, b
}

func randBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.UintN(256))
	}
	return p
}

// pattern is n bytes of a random 4 KiB block repeated with a twist, cheap
// to make at any size and still distinct per seed and per page.
func pattern(seed uint64, n int) []byte {
	p := make([]byte, n)
	blk := randBytes(seed, 4*kib)
	for off := 0; off < n; off += len(blk) {
		copy(p[off:], blk)
		blk[0]++
	}
	return p
}

// getRemote reads a staging the way a consumer does: Remote, then a GET
// by another backend (another node) with the descriptor's fields.
func getRemote(t *testing.T, s *rdma.Staging) []byte {
	t.Helper()
	addr, n, _, key, err := s.Remote()
	if err != nil {
		t.Fatalf("Remote: %v", err)
	}
	dst := make([]byte, n)
	if err := rdmatest.New().Get(context.Background(), 0, addr, key, dst); err != nil {
		t.Fatalf("GET: %v", err)
	}
	return dst
}

// readAll reads a staging through ReadAt in pieces of step bytes.
func readAll(t *testing.T, s *rdma.Staging, step int) []byte {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, step)
	for off := int64(0); ; {
		n, err := s.ReadAt(buf, off)
		out.Write(buf[:n])
		off += int64(n)
		if err == io.EOF {
			return out.Bytes()
		}
		if err != nil {
			t.Fatalf("ReadAt(%d): %v", off, err)
		}
	}
}
