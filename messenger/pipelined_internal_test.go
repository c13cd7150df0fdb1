package messenger

import (
	"reflect"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/velo-go/velo/ext"
)

// TestJobSize holds a request's job to the size it was cut to: a job is
// copied into its queue segment by the reader and out of it by a worker,
// so every byte of it is paid twice per request. It was 216 bytes (the
// whole inbound message and the parsed header side by side).
func TestJobSize(t *testing.T) {
	if n := unsafe.Sizeof(job{}); n > 160 {
		t.Fatalf("a job is %d bytes, want at most 160", n)
	}
}

// countingOwner is a read buffer that counts how it is released.
type countingOwner struct {
	calls atomic.Int64 // Release and ReleaseN calls
	units atomic.Int64 // references released
}

func (o *countingOwner) Retain()  {}
func (o *countingOwner) Release() { o.ReleaseN(1) }
func (o *countingOwner) ReleaseN(n int) {
	o.calls.Add(1)
	o.units.Add(int64(n))
}

// TestSpawnWorkerReleasesInBatches: a worker that runs a burst of requests
// read into one buffer releases them a run at a time (doneBatch), not one
// atomic update of the buffer and one of the drain's count per request;
// every reference still goes back, and the drain still ends.
func TestSpawnWorkerReleasesInBatches(t *testing.T) {
	const reads, perRead = 50, 64
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	var ran atomic.Int64
	r := m.newRegistered(FireHandler("burst", func(*Context) { ran.Add(1) }), false)
	owner := &countingOwner{}
	for range reads {
		var b spawnBatch
		for range perRead {
			j := fireJob(t, st)
			j.owner = owner
			b.dispatch(r, &j)
		}
		b.flush()
	}
	drained(t, st, "the burst")
	if n := ran.Load(); n != reads*perRead {
		t.Fatalf("%d requests ran, want %d", n, reads*perRead)
	}
	// A worker releases a run's guards, then its buffer: the drain may
	// end between the two.
	for deadline := time.Now().Add(10 * time.Second); owner.units.Load() != reads*perRead; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d buffer references released", owner.units.Load(), reads*perRead)
		}
		runtime.Gosched()
	}
	calls := owner.calls.Load()
	t.Logf("%d requests released in %d calls", reads*perRead, calls)
	if calls > reads*perRead/8 {
		t.Fatalf("%d releases for %d requests of one buffer: not batched", calls, reads*perRead)
	}
}

// TestReaderBuildsJobsInPlace: the reader builds a request's job in the
// segment it is queued in (spawnBatch.slot), so a read of requests to one
// handler copies each job once, by the worker, not also from the reader's
// stack into the segment. A slot written and not kept (a request held for
// its connection's proof, say) is cleared with its segment.
func TestReaderBuildsJobsInPlace(t *testing.T) {
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	block := make(chan struct{})
	r := m.newRegistered(FireHandler("burst", func(*Context) { <-block }), false)
	var b spawnBatch
	var scratch job
	first := b.slot(&scratch)
	if first != &scratch {
		t.Fatal("the first job of a read went into a segment that is not there yet")
	}
	*first = fireJob(t, st)
	b.dispatch(r, first)
	for i := 1; i < 10; i++ {
		j := b.slot(&scratch)
		if j != &b.seg.jobs[i] {
			t.Fatalf("job %d was not built in its segment's slot", i)
		}
		*j = fireJob(t, st)
		b.dispatch(r, j)
		if b.seg.tail != i+1 || &b.seg.jobs[i] != j {
			t.Fatalf("job %d was moved: tail %d", i, b.seg.tail)
		}
	}
	// A slot written and then not dispatched (held, dropped): not queued.
	left := b.slot(&scratch)
	left.payload = []byte("not queued")
	seg := b.seg
	if seg.tail != 10 || seg.dirty != 11 {
		t.Fatalf("tail %d dirty %d, want 10 and 11", seg.tail, seg.dirty)
	}
	close(block)
	b.flush()
	drained(t, st, "the read")
	// The queue ran empty: its last segment started over, cleared up to
	// the slot that was written and not kept.
	r.pool.mu.Lock()
	stale := seg.jobs[10].payload
	r.pool.mu.Unlock()
	if stale != nil {
		t.Fatal("a segment kept a job that was never queued")
	}
}

// TestRememberedDecimalCountsDown: the digits of a number a little below
// the last one are had by lowering its last digit (lastDecimal), and are
// the digits strconv writes, across tens, hundreds and the last digit.
func TestRememberedDecimalCountsDown(t *testing.T) {
	var l lastDecimal
	for _, start := range []uint64{100_000_007, 1_000, 19, 1} {
		for x := start; x+200_000 > start; {
			got := string(l.appendDecimal(nil, x))
			if want := strconv.FormatUint(x, 10); got != want {
				t.Fatalf("after %d: %q, want %q", start, got, want)
			}
			if x < 3 {
				break
			}
			x -= uint64(x%3 + 1) // steps of 1 to 3
		}
	}
}

// TestInitJobOverwritesAStaleSlot: a reader builds a job in a slot that
// may still hold one it did not keep (spawnBatch.slot); initJob and the
// header's parse between them write every field, so the job is what a
// fresh one would be.
func TestInitJobOverwritesAStaleSlot(t *testing.T) {
	hdr := appendRequestHeader(nil, FireAndForget, ResponseID{Lo: 7, Hi: 9}, "sink", nil)
	msg := ext.InboundMessage{Frame: ext.Frame{Header: hdr, Payload: []byte("payload"), Conn: 3}}
	stale := job{payload: []byte("old"), owner: &countingOwner{}, conn: 99, dl: time.Now(), at: 5,
		hdr: requestHeader{rtype: UnaryResponse, handler: []byte("old"), headers: []byte{0x81}}}
	j := stale
	initJob(&j, &msg)
	if err := parseRequestHeaderInto(msg.Header, &j.hdr); err != nil {
		t.Fatal(err)
	}
	want := job{payload: msg.Payload, conn: msg.Conn}
	if err := parseRequestHeaderInto(msg.Header, &want.hdr); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("job %+v, want %+v", j, want)
	}
}
