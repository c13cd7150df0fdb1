package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
)

// Two nodes in one process: the owner stages, the consumer GETs into a
// destination from its own pool with its own backend, as over UCX. The
// destination's bytes are the owner's; Release is idempotent and Bytes is
// nil after it.
func TestAllocDestCrossNodeGet(t *testing.T) {
	owner, ob := newReg(t, small())
	ob.SetSelf(11)
	consumer, cb := newReg(t, small())
	data := pattern(12, 300*kib)
	s, why := owner.StagePinned(data)
	if s == nil {
		t.Fatal(why)
	}
	addr, n, _, key, err := s.Remote()
	if err != nil {
		t.Fatal(err)
	}
	dst, err := consumer.AllocDest(int(n))
	if err != nil {
		t.Fatal(err)
	}
	if len(dst.Bytes()) != len(data) {
		t.Fatalf("destination of %d bytes", len(dst.Bytes()))
	}
	if err := cb.Get(context.Background(), 11, addr, key, dst.Bytes()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes(), data) {
		t.Fatal("the GET into the destination read different bytes")
	}
	dst.Release()
	dst.Release()
	if dst.Bytes() != nil {
		t.Fatal("Bytes after Release")
	}
	if _, err := consumer.AllocDest(0); !errors.Is(err, rdma.ErrBadRange) {
		t.Fatalf("AllocDest(0): %v", err)
	}
	s.Release()
}

// A consumer's GET from an owner killed mid-GET fails with ErrGetFailed,
// the owner's staging is unaffected, and releasing it unmaps nothing it
// should not.
func TestGetFromKilledOwner(t *testing.T) {
	owner, ob := newReg(t, small())
	s, _ := owner.StagePinned(make([]byte, 100))
	addr, n, _, key, _ := s.Remote()
	cb := rdmatest.New()
	ob.BlockGets()
	errc := make(chan error, 1)
	go func() { errc <- cb.Get(context.Background(), 0, addr, key, make([]byte, n)) }()
	if err := ob.WaitParked(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	ob.Kill()
	if err := <-errc; !errors.Is(err, rdma.ErrGetFailed) {
		t.Fatalf("GET from a killed owner: %v", err)
	}
	s.Release()
}
