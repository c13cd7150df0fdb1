package mux

import (
	"errors"
	"sync"
	"testing"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/internal/testwait"
)

// seqChecker is a post function that fails the test when a lane's
// batch_seq does not grow by one within an epoch.
type seqChecker struct {
	t       *testing.T
	mu      sync.Mutex
	epoch   uint64
	seq     uint32
	batches int
	opens   int
}

func (c *seqChecker) post(_ ext.WorkerID, _ int, batch []byte) error {
	dec, err := muxwire.Decode(batch)
	if err != nil {
		c.t.Error(err)
		return nil
	}
	h := dec.Header
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.Epoch == c.epoch && h.Seq != c.seq+1 {
		c.t.Errorf("epoch %d: batch_seq %d after %d", h.Epoch, h.Seq, c.seq)
	}
	c.epoch, c.seq = h.Epoch, h.Seq
	c.batches++
	for r := dec.Records(); ; {
		rec, ok := r.Next()
		if !ok {
			break
		}
		if rec.Type == muxwire.OpenSlot {
			c.opens++
		}
	}
	return nil
}

// TestMuxOpenWaitsForTheLaneOwner: an attach that finds the lane's writes
// taken does not write: it queues its OpenSlot and the owner posts it as
// it lets go, with every other open queued meanwhile, in one batch.
func TestMuxOpenWaitsForTheLaneOwner(t *testing.T) {
	c := &seqChecker{t: t}
	mx := New(Config{}, testHeartbeat, c.post)
	defer mx.Close()
	b, err := mx.BatcherFor(7, 0)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the lane's writes to be free", b.TryOwn)
	const n = 3
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := b.Open(uint64(i+1), uint64(i+1), 4)
			errs <- err
		}()
	}
	testwait.Until(t, "the attaches to queue", func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return b.OpenWaiters == n
	})
	c.mu.Lock()
	if c.batches != 0 {
		t.Errorf("%d batches written while the lane was held", c.batches)
	}
	c.mu.Unlock()
	b.Release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batches != 1 || c.opens != n {
		t.Errorf("%d OpenSlots in %d batches, want %d in 1", c.opens, c.batches, n)
	}
}

// TestMuxControlWorkGoesToTheLaneWriter: who writes a queued job. A
// reader's job on a live batcher wakes its goroutine; one queued while the
// lane is taken is the owner's; once the goroutine is gone, the caller
// writes it.
func TestMuxControlWorkGoesToTheLaneWriter(t *testing.T) {
	c := &seqChecker{t: t}
	mx := New(Config{}, testHeartbeat, c.post)
	defer mx.Close()
	b, err := mx.BatcherFor(7, 0)
	if err != nil {
		t.Fatal(err)
	}
	job := LaneJob{Kind: JobLateCloses, Closes: []CloseReply{{ID: 1, Reason: muxwire.UnknownSlot}}}
	b.Mu.Lock()
	if w := b.QueueJobLocked(job, false); w != WakeWrites {
		t.Errorf("a reader's job on a live batcher: %v, want the goroutine's", w)
	}
	b.Mu.Unlock()
	b.Signal(metrics.WakeFrame)
	testwait.Until(t, "the goroutine to write it", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.batches == 1
	})
	testwait.Until(t, "the lane's writes to be free", b.TryOwn)
	b.Mu.Lock()
	if w := b.QueueJobLocked(job, true); w != OwnerWrites {
		t.Errorf("a job while the lane is taken: %v, want the owner's", w)
	}
	b.Mu.Unlock()
	b.Release() // writes it
	c.mu.Lock()
	if c.batches != 2 {
		t.Errorf("%d batches after the owner let go, want 2", c.batches)
	}
	c.mu.Unlock()
	mx.Mu.Lock()
	delete(mx.Batchers, LaneKey{Peer: 7, Lane: 0}) // as close does, before its goodbye
	b.Mu.Lock()
	b.State.To(BatcherRetired)
	b.State.To(BatcherClosing)
	b.Mu.Unlock()
	mx.Mu.Unlock()
	b.Stop()
	b.Mu.Lock()
	w := b.QueueJobLocked(job, false)
	b.Mu.Unlock()
	if w != CallerWrites {
		t.Errorf("a reader's job once the goroutine is gone: %v, want the caller's", w)
	} else {
		b.Release()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batches != 3 {
		t.Errorf("%d batches, want 3", c.batches)
	}
}

// TestMuxGoodbyeTellsOpenWaitersItsRefusal: an attach whose OpenSlot the
// goodbye writes hears the goodbye's outcome; a refused post is not taken
// as an open slot.
func TestMuxGoodbyeTellsOpenWaitersItsRefusal(t *testing.T) {
	refused := errors.New("test: batch refused")
	mx := New(Config{}, testHeartbeat, func(ext.WorkerID, int, []byte) error { return refused })
	defer mx.Close()
	b, err := mx.BatcherFor(7, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := &OutSlot{B: b}
	testwait.Until(t, "the lane's writes to be free", b.TryOwn)
	b.RunJob(LaneJob{Kind: JobGoodbye, Opens: []*OutSlot{s}})
	b.Release()
	if err := b.AwaitOpen(s); !errors.Is(err, refused) {
		t.Fatalf("the waiter heard %v, want the refusal", err)
	}
}

// testHeartbeat is the heartbeat window of a Mux made by a test: the
// default a node answers attaches with.
const testHeartbeat = wire.DefaultHeartbeatIntervalMS * time.Millisecond
