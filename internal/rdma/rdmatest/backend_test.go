package rdmatest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"unsafe"

	"github.com/velo-go/velo/internal/rdma"
)

// mapBuf maps buf on b and packs one key.
func mapBuf(t *testing.T, b *Backend, buf []byte) (rdma.Mapping, uint64, []byte) {
	t.Helper()
	m, err := b.Map(unsafe.Pointer(&buf[0]), len(buf))
	if err != nil {
		t.Fatal(err)
	}
	k, err := m.PackKey()
	if err != nil {
		t.Fatal(err)
	}
	return m, uint64(uintptr(unsafe.Pointer(&buf[0]))), k
}

// A key one backend packed works in a GET another backend runs (two nodes
// in one process), the bytes arrive exactly, and every refusal matches
// ErrGetFailed: out of range, wrong owner, key of an unmapped region.
func TestGetAcrossBackends(t *testing.T) {
	owner, consumer := New(), New()
	owner.SetSelf(7)
	src := []byte("0123456789abcdef")
	m, addr, k := mapBuf(t, owner, src)
	ctx := context.Background()

	dst := make([]byte, 6)
	if err := consumer.Get(ctx, 7, addr+4, k, dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, src[4:10]) {
		t.Fatalf("got %q, want %q", dst, src[4:10])
	}
	for name, err := range map[string]error{
		"past the end":  consumer.Get(ctx, 7, addr+12, k, dst),
		"before start":  consumer.Get(ctx, 7, addr-1, k, dst),
		"wrong owner":   consumer.Get(ctx, 8, addr, k, dst),
		"forged key":    consumer.Get(ctx, 7, addr, []byte("nope"), dst),
		"empty dst":     consumer.Get(ctx, 7, addr, k, nil),
		"whole mapping": consumer.Get(ctx, 7, addr, k, make([]byte, len(src))),
	} {
		if name == "whole mapping" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, rdma.ErrGetFailed) {
			t.Errorf("%s: err %v, want ErrGetFailed", name, err)
		}
	}
	if err := m.Unmap(); err != nil {
		t.Fatal(err)
	}
	if err := consumer.Get(ctx, 7, addr, k, dst); !errors.Is(err, rdma.ErrGetFailed) {
		t.Errorf("after unmap: err %v, want ErrGetFailed", err)
	}
	if _, err := m.PackKey(); !errors.Is(err, ErrUnmapped) {
		t.Errorf("PackKey after unmap: %v", err)
	}
	if err := m.Unmap(); !errors.Is(err, ErrUnmapped) {
		t.Errorf("second unmap: %v", err)
	}
	if got := consumer.Gets(); got != 8 {
		t.Errorf("consumer.Gets = %d, want 8", got)
	}
	if owner.Maps() != 1 || owner.Unmaps() != 1 || owner.LiveMappings() != 0 {
		t.Errorf("maps %d unmaps %d live %d", owner.Maps(), owner.Unmaps(), owner.LiveMappings())
	}
}

// The effective range is whole pages around the mapped bytes.
func TestEffectiveRangeIsPageRounded(t *testing.T) {
	b := New()
	buf := make([]byte, 3*int(pageSize))
	m, err := b.Map(unsafe.Pointer(&buf[10]), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	lo, n := m.EffectiveRange()
	p := uintptr(unsafe.Pointer(&buf[10]))
	if lo > p || lo+uintptr(n) < p+100 || lo%pageSize != 0 || uintptr(n)%pageSize != 0 {
		t.Fatalf("effective [%#x,+%d) does not cover [%#x,+100) in whole pages", lo, n, p)
	}
}

// Injected failures: FailGets, FailMaps and FailUnmaps fail exactly n
// times; a failed Unmap leaves the mapping live.
func TestInjectedFailures(t *testing.T) {
	b := New()
	buf := make([]byte, 64)
	m, addr, k := mapBuf(t, b, buf)
	b.FailGets(2)
	ctx := context.Background()
	for i := range 3 {
		err := b.Get(ctx, 0, addr, k, make([]byte, 8))
		if (i < 2) != errors.Is(err, rdma.ErrGetFailed) {
			t.Errorf("GET %d: %v", i, err)
		}
	}
	b.FailMaps(1)
	if _, err := b.Map(unsafe.Pointer(&buf[0]), 8); !errors.Is(err, ErrInjected) {
		t.Errorf("map: %v", err)
	}
	b.FailUnmaps(1)
	if err := m.Unmap(); !errors.Is(err, ErrInjected) {
		t.Errorf("unmap: %v", err)
	}
	if b.LiveMappings() != 1 {
		t.Fatalf("a failed unmap unmapped")
	}
	if err := m.Unmap(); err != nil {
		t.Fatal(err)
	}
}

// A parked GET resumes on release; Kill fails a parked GET at once, and
// every GET after it; ctx ending fails a parked GET with ctx's error.
func TestBlockReleaseKill(t *testing.T) {
	owner, consumer := New(), New()
	buf := []byte("payload!")
	m, addr, k := mapBuf(t, owner, buf)
	defer m.Unmap()
	ctx := context.Background()

	owner.BlockGets()
	done := make(chan error, 1)
	dst := make([]byte, len(buf))
	go func() { done <- consumer.Get(ctx, 0, addr, k, dst) }()
	if err := owner.WaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if consumer.Parked() != 1 {
		t.Errorf("consumer.Parked = %d", consumer.Parked())
	}
	owner.ReleaseGets()
	if err := <-done; err != nil || !bytes.Equal(dst, buf) {
		t.Fatalf("released GET: %v %q", err, dst)
	}

	cctx, cancel := context.WithCancel(ctx)
	consumer.BlockGets()
	go func() { done <- consumer.Get(cctx, 0, addr, k, dst) }()
	if err := consumer.WaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, rdma.ErrGetFailed) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled GET: %v", err)
	}
	consumer.ReleaseGets()

	owner.BlockGets()
	go func() { done <- consumer.Get(ctx, 0, addr, k, dst) }()
	if err := owner.WaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	owner.Kill()
	if err := <-done; !errors.Is(err, rdma.ErrGetFailed) {
		t.Fatalf("GET on a killed owner: %v", err)
	}
	if err := consumer.Get(ctx, 0, addr, k, dst); !errors.Is(err, rdma.ErrGetFailed) {
		t.Fatalf("GET after kill: %v", err)
	}
	if owner.Parked() != 0 {
		t.Errorf("parked after all GETs ended: %d", owner.Parked())
	}
}

// Reachable answers what SetReachable set, and Name is "ucx".
func TestReachableAndName(t *testing.T) {
	b := New()
	if b.Name() != "ucx" || b.Reachable(3) {
		t.Fatal("fresh backend")
	}
	b.SetReachable(3, true)
	if !b.Reachable(3) {
		t.Fatal("not reachable after SetReachable")
	}
	b.SetReachable(3, false)
	if b.Reachable(3) {
		t.Fatal("still reachable")
	}
}
