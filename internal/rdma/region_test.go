package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/velo-go/velo/internal/rdma"
)

// Ranges are relative to the registered pointer and checked against the
// registered length, not the page-rounded effective range; a range in
// bounds is served by GET and ReadAt with the region's own bytes, no copy.
func TestStageInRegionRanges(t *testing.T) {
	r, _ := newReg(t, small())
	backing := randBytes(3, 3*4096)
	buf := backing[100 : 100+5000] // not page aligned
	g, err := r.RegisterOwned(buf)
	if err != nil {
		t.Fatal(err)
	}
	base, eff := g.EffectiveRange()
	p := uintptr(unsafe.Pointer(&buf[0]))
	if base > p || base+uintptr(eff) < p+5000 || g.Len() != 5000 {
		t.Fatalf("effective [%#x,+%d) does not cover the buffer at %#x", base, eff, p)
	}
	other, _ := newReg(t, small())
	for _, c := range []struct{ off, n int }{{-1, 10}, {0, 0}, {0, 5001}, {4990, 11}, {5000, 1}, {0, -5}} {
		if _, err := r.StageInRegion(g, c.off, c.n); !errors.Is(err, rdma.ErrBadRange) {
			t.Errorf("[%d,+%d): %v, want ErrBadRange", c.off, c.n, err)
		}
	}
	if _, err := other.StageInRegion(g, 0, 1); !errors.Is(err, rdma.ErrBadRange) {
		t.Errorf("a guard of another registry: %v", err)
	}
	s, err := r.StageInRegion(g, 4000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !s.InRegion() {
		t.Fatal("not InRegion")
	}
	addr, _, _, _, _ := s.Remote()
	if addr != uint64(p)+4000 {
		t.Fatalf("descriptor address %#x, want the buffer's own byte %#x", addr, uint64(p)+4000)
	}
	if got := getRemote(t, s); !bytes.Equal(got, buf[4000:]) {
		t.Fatal("GET read different bytes")
	}
	buf[4500] ^= 1 // no copy: the staging sees the region change
	if got := readAll(t, s, 333); !bytes.Equal(got, buf[4000:]) {
		t.Fatal("ReadAt read different bytes")
	}
	s.Release()
	back, res, err := g.UnregisterOwned(time.Second)
	if err != nil || res != rdma.Drained || &back[0] != &buf[0] || len(back) != len(buf) {
		t.Fatalf("UnregisterOwned: %v %v, same buffer %v", res, err, len(back) > 0 && &back[0] == &buf[0])
	}
	select {
	case <-g.Deregistered():
	default:
		t.Fatal("Deregistered open after a confirmed unmap")
	}
	if _, err := r.StageInRegion(g, 0, 1); !errors.Is(err, rdma.ErrDeregistered) {
		t.Fatalf("staging after Unregister: %v", err)
	}
}

// RegisterOwned's refusal carries the buffer back; RegisterExternal
// checks its range; UnregisterOwned refuses a guard it does not own.
func TestRegisterRefusals(t *testing.T) {
	cfg := small()
	cfg.Pool.RegisteredBytesBudget = 1 * mib
	r, _ := newReg(t, cfg)
	buf := make([]byte, 2*mib)
	_, err := r.RegisterOwned(buf)
	var roe *rdma.RegisterOwnedError
	if !errors.Is(err, rdma.ErrBudget) || !errors.As(err, &roe) || &roe.Buf[0] != &buf[0] {
		t.Fatalf("RegisterOwned over budget: %v", err)
	}
	if _, err := r.RegisterOwned(nil); !errors.Is(err, rdma.ErrBadRange) {
		t.Fatalf("empty buffer: %v", err)
	}
	if _, err := r.RegisterExternal(nil, 10); !errors.Is(err, rdma.ErrBadRange) {
		t.Fatalf("nil pointer: %v", err)
	}
	mem := make([]byte, 64)
	if _, err := r.RegisterExternal(unsafe.Pointer(&mem[0]), 0); !errors.Is(err, rdma.ErrBadRange) {
		t.Fatalf("zero length: %v", err)
	}
	g, err := r.RegisterExternal(unsafe.Pointer(&mem[0]), len(mem))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.UnregisterOwned(0); !errors.Is(err, rdma.ErrNotOwned) {
		t.Fatalf("UnregisterOwned of an external region: %v", err)
	}
	w := g.Watch()
	if res, err := g.Unregister(0); res != rdma.Drained || err != nil {
		t.Fatalf("Unregister: %v %v", res, err)
	}
	if res, err := g.Unregister(0); res != rdma.Drained || err != nil {
		t.Fatalf("second Unregister: %v %v", res, err)
	}
	<-w.Deregistered()
}

// Unregister waits for a ReadAt in progress even after its staging was
// released: the copy holds the staging, and the staging the region. Only
// when the copy ends does the unmap run (Drained), and Deregistered close.
func TestUnregisterWaitsForReadAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, b := newReg(t, small())
		buf := randBytes(4, 2*mib)
		g, err := r.RegisterOwned(buf)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := r.StageInRegion(g, 0, len(buf))
		inCopy, proceed := make(chan struct{}), make(chan struct{})
		// The first copy stops until the test lets it go. It must block on
		// the send: a select with a default let a reader that got here
		// before the test's receive copy on, and the test then waited on
		// inCopy for ever (a synctest deadlock).
		var first atomic.Bool
		rdma.SetCopyHook(r, func() {
			if first.CompareAndSwap(false, true) {
				inCopy <- struct{}{}
				<-proceed
			}
		})
		read := make(chan []byte)
		go func() {
			p := make([]byte, len(buf))
			n, _ := s.ReadAt(p, 0)
			read <- p[:n]
		}()
		<-inCopy
		s.Release() // does not wait for the reader
		unreg := make(chan rdma.DrainResult, 1)
		go func() {
			res, _ := g.Unregister(time.Hour)
			unreg <- res
		}()
		synctest.Wait()
		select {
		case res := <-unreg:
			t.Fatalf("Unregister returned %v with a copy in progress", res)
		case <-g.Deregistered():
			t.Fatal("Deregistered closed with a copy in progress")
		default:
		}
		if b.LiveMappings() != 1 {
			t.Fatal("unmapped with a copy in progress")
		}
		close(proceed)
		if got := <-read; !bytes.Equal(got, buf) {
			t.Fatal("the copy read different bytes")
		}
		if res := <-unreg; res != rdma.Drained {
			t.Fatalf("Unregister: %v", res)
		}
		<-g.Deregistered()
		if b.LiveMappings() != 0 {
			t.Fatal("still mapped")
		}
	})
}

// A staging never released runs Unregister out of time: DrainTimedOut
// after exactly the timeout, the memory unmapped and Deregistered closed;
// the staging's Remote and ReadAt are refused, and its late Release is
// harmless.
func TestUnregisterDrainTimedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, b := newReg(t, small())
		g, err := r.RegisterOwned(make([]byte, 10*kib))
		if err != nil {
			t.Fatal(err)
		}
		s, _ := r.StageInRegion(g, 0, 100)
		start := time.Now()
		res, err := g.Unregister(5 * time.Second)
		if res != rdma.DrainTimedOut || err != nil {
			t.Fatalf("Unregister: %v %v", res, err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Fatalf("waited %v, want the timeout", d)
		}
		<-g.Deregistered()
		if b.LiveMappings() != 0 {
			t.Fatal("still mapped")
		}
		if _, _, _, _, err := s.Remote(); !errors.Is(err, rdma.ErrDeregistered) {
			t.Fatalf("Remote: %v", err)
		}
		if _, err := s.ReadAt(make([]byte, 10), 0); !errors.Is(err, rdma.ErrDeregistered) {
			t.Fatalf("ReadAt: %v", err)
		}
		s.Release()
	})
}

// A copy in progress delays the latch, even when the drain has given up:
// the unmap cannot run while the copy holds the gate.
func TestCopyDelaysLatch(t *testing.T) {
	r, b := newReg(t, small())
	buf := randBytes(5, 64*kib)
	g, err := r.RegisterOwned(buf)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := r.StageInRegion(g, 0, len(buf))
	latching := make(chan struct{})
	rdma.SetLatchHook(r, func() { close(latching) })
	var liveInCopy int
	first := true
	rdma.SetCopyHook(r, func() {
		if first {
			first = false
			go func() { _, _ = g.Unregister(0) }()
			<-latching
			liveInCopy = b.LiveMappings()
		}
	})
	p := make([]byte, len(buf))
	if n, err := s.ReadAt(p, 0); n != len(buf) || err != nil || !bytes.Equal(p, buf) {
		t.Fatalf("ReadAt under a latch: %d %v", n, err)
	}
	if liveInCopy != 1 {
		t.Fatal("unmapped while a copy held the gate")
	}
	<-g.Deregistered()
	s.Release()
}

// Drop unregisters in the background; Deregistered says when it is done.
func TestDropDeregisters(t *testing.T) {
	r, b := newReg(t, small())
	g, err := r.RegisterOwned(make([]byte, 100))
	if err != nil {
		t.Fatal(err)
	}
	g.Drop()
	<-g.Deregistered()
	if b.LiveMappings() != 0 {
		t.Fatal("still mapped")
	}
	g.Drop() // a second drop does nothing
}

// A region whose unmap the backend refuses stays registered and held:
// Unregister returns the error, UnregisterOwned no buffer, Deregistered
// stays open through Shutdown, and closes at AfterBackendClose.
func TestRefusedRegionUnmap(t *testing.T) {
	r, b := newReg(t, small())
	g, err := r.RegisterOwned(make([]byte, 100))
	if err != nil {
		t.Fatal(err)
	}
	b.FailUnmaps(1)
	buf, _, err := g.UnregisterOwned(0)
	if err == nil || buf != nil {
		t.Fatalf("UnregisterOwned after a refused unmap: %v, buffer back %v", err, buf != nil)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.Deregistered():
		t.Fatal("Deregistered closed on a refused unmap")
	default:
	}
	r.AfterBackendClose()
	<-g.Deregistered()
}
