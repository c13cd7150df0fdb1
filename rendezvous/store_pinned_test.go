package rendezvous

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/rendezvous/internal/rdmapath"
)

// fakeStaging is registered memory as the store sees it. read, when set,
// runs at the start of every ReadAt (a test parks a copy there).
type fakeStaging struct {
	mem      []byte
	read     func()
	readErr  error
	released atomic.Int32
}

func (f *fakeStaging) Len() int { return len(f.mem) }
func (f *fakeStaging) Remote() (uint64, uint64, uint64, []byte, error) {
	return 0x1000, uint64(len(f.mem)), 1, []byte{1}, nil
}
func (f *fakeStaging) ReadAt(p []byte, off int64) (int, error) {
	if f.read != nil {
		f.read()
	}
	if f.released.Load() != 0 {
		return 0, errors.New("read after release")
	}
	if f.readErr != nil {
		return 0, f.readErr
	}
	return copy(p, f.mem[off:]), nil
}
func (f *fakeStaging) Release() { f.released.Add(1) }

// A pinned slot's chunks are copies of its registered memory, never
// slices of it: a peer holding the key may write it at any time.
func TestPinnedChunksAreCopies(t *testing.T) {
	s := newStore()
	f := &fakeStaging{mem: bytes.Repeat([]byte("abcdefg"), (2*ChunkSize+5)/7+1)[:2*ChunkSize+5]}
	want := bytes.Clone(f.mem)
	id := s.addStaged(f, 0)
	if md, _ := s.metadata(id); !md.Pinned || md.TotalLen != uint64(len(want)) {
		t.Fatalf("metadata %+v", md)
	}
	rd, _ := s.acquire(id, 0, 7)
	var got []byte
	for i := range rd.ChunkCount {
		b, v := s.chunk(rd.TransferID, i, 7)
		if v != done {
			t.Fatalf("chunk %d: %v", i, v)
		}
		got = append(got, b...)
	}
	clear(f.mem) // a remote write after the pulls
	if !bytes.Equal(got, want) {
		t.Fatal("the chunks are not the staged bytes, or alias the registered memory")
	}
	// A staging that refuses the copy (its region deregistered) makes the chunk not found.
	f.readErr = errors.New("deregistered")
	if _, v := s.chunk(rd.TransferID, 0, 7); v != notFound {
		t.Fatalf("a refused copy: %v", v)
	}
	if v := s.endLease(id, rd.LeaseID, true, 7); v != done || f.released.Load() != 1 {
		t.Fatalf("release: %v, staging released %d times", v, f.released.Load())
	}
}

// The slot is freed while a chunk is being copied out of its staging:
// the staging is released by the copy's end, once, and not before.
func TestStagingOutlivesItsLastCopy(t *testing.T) {
	s := newStore()
	entered, resume := make(chan struct{}), make(chan struct{})
	f := &fakeStaging{mem: make([]byte, 100)}
	f.read = func() { close(entered); <-resume }
	id := s.addStaged(f, 0)
	rd, _ := s.acquire(id, 0, 7)
	res := make(chan verdict)
	go func() { _, v := s.chunk(rd.TransferID, 0, 7); res <- v }()
	<-entered
	if v := s.endLease(id, rd.LeaseID, true, 7); v != done {
		t.Fatal(v)
	}
	if _, n := s.heldBytes(); n != 0 || f.released.Load() != 0 {
		t.Fatalf("slots %d, staging released %d times while a copy ran", n, f.released.Load())
	}
	close(resume)
	if v := <-res; v != done {
		t.Fatalf("the copy that started before the free: %v", v)
	}
	if f.released.Load() != 1 {
		t.Fatalf("staging released %d times, want once", f.released.Load())
	}
}

// Demotion copies a pinned slot into plain memory and lets the staging
// go, but waits for a copy out of it that is still running; a pull after
// it reads the heap copy.
func TestDemoteWaitsForRunningCopies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		defer s.close()
		var gate sync.Once
		parked, resume := make(chan struct{}), make(chan struct{})
		f := &fakeStaging{mem: bytes.Repeat([]byte{7}, 3*ChunkSize)}
		id := s.addStaged(f, 0)
		rd, _ := s.acquire(id, 0, 7)
		// The first copy (a pull's chunk) parks; demote's own copy does not.
		f.read = func() {
			first := false
			gate.Do(func() { first = true })
			if first {
				close(parked)
				<-resume
			}
		}
		pulled := make(chan verdict)
		go func() { _, v := s.chunk(rd.TransferID, 0, 7); pulled <- v }()
		<-parked
		demoted := make(chan int)
		go func() { demoted <- s.demote() }()
		synctest.Wait()
		select {
		case <-demoted:
			t.Fatal("demote returned while a copy out of the staging ran")
		default:
		}
		if md, _ := s.metadata(id); md.Pinned {
			t.Fatal("the slot is still pinned after its copy to the heap")
		}
		close(resume)
		if v := <-pulled; v != done {
			t.Fatalf("the pull admitted before the demotion: %v", v)
		}
		if n := <-demoted; n != 1 || f.released.Load() != 1 {
			t.Fatalf("demoted %d, staging released %d times", n, f.released.Load())
		}
		clear(f.mem)
		b, v := s.chunk(rd.TransferID, 2, 7)
		if v != done || len(b) != ChunkSize || b[0] != 7 {
			t.Fatalf("a pull after the demotion: %v, %d bytes", v, len(b))
		}
	})
}

// An RDMA lease lives while it is renewed, and a silent one is reaped
// between one and one and a half timeouts after its last renewal; the
// reaper runs only while an RDMA lease exists, and the chunked deadline
// the acquire asked for gives way to the RDMA one.
func TestReaper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		s := newStore()
		defer s.close()
		s.reapEvery = rdmapath.ReapEvery(timeout)
		var reaped atomic.Int64
		s.onReap = func(n int) { reaped.Add(int64(n)) }
		id := s.addStaged(&fakeStaging{mem: make([]byte, 10)}, 0)
		rd, _ := s.acquire(id, time.Hour, 7) // a chunked deadline first
		armed := s.armRDMA(rd.LeaseID, timeout)
		s.mu.Lock()
		deadlines, live, reaping := s.deadlines, s.rdmaLive, s.reaping
		s.mu.Unlock()
		if !armed || deadlines != 0 || live != 1 || !reaping {
			t.Fatalf("arm %v: deadlines %d, rdma leases %d, reaping %v", armed, deadlines, live, reaping)
		}
		for range 10 { // a second of renewals, every 60 ms
			time.Sleep(60 * time.Millisecond)
			if s.renew(id, rd.LeaseID, 7) != done {
				t.Fatal("the renewed lease was reaped")
			}
		}
		time.Sleep(timeout - time.Millisecond)
		synctest.Wait()
		if _, _, ok := leaseOf(s, rd.LeaseID); !ok {
			t.Fatal("reaped before one timeout of silence")
		}
		time.Sleep(timeout/2 + 2*time.Millisecond)
		synctest.Wait()
		if _, _, ok := leaseOf(s, rd.LeaseID); ok || reaped.Load() != 1 {
			t.Fatalf("after 1.5 timeouts of silence: lease kept %v, reaped %d", ok, reaped.Load())
		}
		s.mu.Lock()
		running := s.reaping || s.sweeping
		s.mu.Unlock()
		if running {
			t.Fatal("a timer runs with no deadline left")
		}
		// The slot stays: the reaper takes the read lock, not the reference.
		if _, n := s.heldBytes(); n != 1 {
			t.Fatalf("%d slots after the reap", n)
		}
	})
}

func leaseOf(s *store, lid uint64) (uint64, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[lid]
	if !ok {
		return 0, 0, false
	}
	return l.transferID, l.local, true
}
