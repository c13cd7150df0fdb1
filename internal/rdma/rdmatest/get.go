package rdmatest

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/rdma"
)

// Get copies len(dst) bytes at addr of the mapping that rkey names into
// dst. Every failure matches rdma.ErrGetFailed: an unknown or unmapped
// key, a range outside the mapping, an owner id that is not the key's
// (see SetSelf), an injected failure, a killed backend, or ctx ending
// while the GET is parked (that error also matches ctx.Err()).
//
// The fault hooks of both backends involved apply: the one that runs the
// GET (b) and the one whose mapping it reads.
func (b *Backend) Get(ctx context.Context, owner ext.WorkerID, addr uint64, rkey []byte, dst []byte) error {
	b.gets.Add(1)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", rdma.ErrGetFailed, err)
	}
	if len(dst) == 0 {
		return getErr("empty destination")
	}
	if b.takeGetFailure() {
		return getErr("injected failure")
	}
	m := lookup(rkey)
	if m == nil {
		return getErr("unknown key")
	}
	if err := park(ctx, b, m.b); err != nil {
		return err
	}
	return m.copyOut(owner, addr, dst)
}

// copyOut is the data movement, under the mapping's copy gate.
func (m *mapping) copyOut(owner ext.WorkerID, addr uint64, dst []byte) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.gone {
		return getErr("key of an unmapped region")
	}
	m.b.mu.Lock()
	self, dead := m.b.self, m.b.dead
	m.b.mu.Unlock()
	if dead {
		return getErr("owner killed")
	}
	if self != 0 && self != owner {
		return getErr(fmt.Sprintf("key belongs to worker %d, not %d", self, owner))
	}
	base := uint64(uintptr(m.base))
	if addr < base || addr-base > uint64(m.n) || uint64(len(dst)) > uint64(m.n)-(addr-base) {
		return getErr(fmt.Sprintf("[%#x, +%d) outside the mapping [%#x, +%d)", addr, len(dst), base, m.n))
	}
	src := unsafe.Slice((*byte)(unsafe.Add(m.base, int(addr-base))), len(dst))
	copy(dst, src)
	return nil
}

func getErr(why string) error { return fmt.Errorf("%w: rdmatest: %s", rdma.ErrGetFailed, why) }

// park waits while either backend blocks GETs. It fails at once when
// either is killed, and when ctx ends.
func park(ctx context.Context, run, tgt *Backend) error {
	counted := false
	defer func() {
		if counted {
			run.addParked(-1)
			if tgt != run {
				tgt.addParked(-1)
			}
		}
	}()
	for {
		rb, rk, rdead := run.hooks()
		tb, tk, tdead := tgt.hooks()
		if rdead || tdead {
			return getErr("killed")
		}
		if rb == nil && tb == nil {
			return nil
		}
		if !counted {
			counted = true
			run.addParked(1)
			if tgt != run {
				tgt.addParked(1)
			}
		}
		select {
		case <-rb: // a nil channel never fires: only a real block waits
		case <-tb:
		case <-rk:
		case <-tk:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", rdma.ErrGetFailed, ctx.Err())
		}
	}
}
