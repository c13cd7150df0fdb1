package mux

// One writer per lane. Every post of a batcher goes through whoever owns
// its writes (b.writing, under b.mu), so batch_seq reaches the peer in
// order. Ownership is only ever taken without waiting: whoever finds it
// taken queues its work (an OpenSlot in b.opens, anything else as a
// LaneJob) and leaves, and the owner writes that work before it lets go
// (release), under the same hold of b.mu that clears b.writing, so no
// queued work is left without a writer.
//
// The batcher's goroutine is the usual owner. A synchronous attach, the
// close's goodbye, the sweep's probe and FlushBatch (inline.go) write
// inline when the lane is free, as they did under a write lock, to save a
// wake; control work that
// comes from a reader (the messenger's callbacks, ingress) never writes
// inline while the goroutine lives, so a reader neither waits for a
// writer nor posts itself. Once the goroutine is gone (the mux closed, the
// batcher stopped), work comes late and rarely, and whoever queues it
// writes it if the lane is free.

import (
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/metrics"
)

// laneJobKind names the control work a LaneJob carries.
type laneJobKind uint8

const (
	JobLateCloses laneJobKind = iota // closes after the mux closed (postCloses)
	JobGoodbye                       // the close's OpenSlots and CloseSlots
	jobOpenGone                      // a pipelined attach answered after its stream ended
	jobAbandon                       // a bind that will not open (abandonBound)
	jobProbe                         // the heartbeat's empty batch
)

// LaneJob is one piece of control work queued for the lane's writer.
type LaneJob struct {
	Kind              laneJobKind
	Closes            []CloseReply // jobLateCloses, jobGoodbye
	Opens             []*OutSlot   // jobGoodbye: OpenSlots that go before its closes
	slot              *OutSlot     // jobOpenGone
	anchorID, session uint64       // jobAbandon
}

// TryOwn is OwnLocked for a caller that does not hold b.mu: a test
// takes the lane's writes with it, so that the batcher's goroutine writes
// nothing until the test calls Release.
func (b *Batcher) TryOwn() bool {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.OwnLocked()
}

// OwnLocked takes the lane's writes if no one holds them. The caller
// holds b.mu; on true it must call release.
func (b *Batcher) OwnLocked() bool {
	if b.writing {
		return false
	}
	b.writing = true
	return true
}

// goneLocked says the batcher's goroutine has ended or is ending, so no
// wake of it would write queued work.
func (b *Batcher) goneLocked() bool {
	if b.State.Stopped() {
		return true
	}
	select {
	case <-b.Mx.stop:
		return true
	default:
		return false
	}
}

// jobWriter says who writes a queued job.
type jobWriter uint8

const (
	OwnerWrites  jobWriter = iota // the lane's current owner, before it lets go
	CallerWrites                  // the caller took the lane: it calls release
	WakeWrites                    // the lane is free: the goroutine, once woken
)

// QueueJobLocked queues j for the lane's writer and says who writes it.
// With inline, the caller writes when the lane is free; without, only
// once the goroutine is gone.
func (b *Batcher) QueueJobLocked(j LaneJob, inline bool) jobWriter {
	b.jobs = append(b.jobs, j)
	switch {
	case b.writing:
		return OwnerWrites
	case inline || b.goneLocked():
		b.writing = true
		return CallerWrites
	}
	return WakeWrites
}

// queueJob is queueJobLocked that takes the lock and sees the job written.
func (b *Batcher) queueJob(j LaneJob, inline bool) {
	b.Mu.Lock()
	w := b.QueueJobLocked(j, inline)
	b.Mu.Unlock()
	b.writeQueued(w)
}

// writeQueued does the caller's part in writing a queued job.
func (b *Batcher) writeQueued(w jobWriter) {
	switch w {
	case CallerWrites:
		b.Release()
	case WakeWrites:
		b.Signal(metrics.WakeControl) // a lane job (jobs are control: opens gone, early refusals)
	}
}

// Release writes what was queued for the owner and gives up the lane's
// writes. A pass that found the lane taken (rerun) is woken again.
func (b *Batcher) Release() {
	b.Mu.Lock()
	for {
		if len(b.jobs) > 0 {
			j := b.jobs[0]
			b.jobs[0] = LaneJob{}
			b.jobs = b.jobs[1:]
			if len(b.jobs) == 0 {
				b.jobs = b.jobs[:0:cap(b.jobs)]
			}
			b.Mu.Unlock()
			b.RunJob(j)
			b.Mu.Lock()
			continue
		}
		if b.OpenWaiters > 0 && len(b.Opens) > 0 {
			b.Mu.Unlock()
			b.postOpens()
			b.Mu.Lock()
			continue
		}
		break
	}
	b.writing = false
	rerun, src := b.rerun, b.rerunSrc
	b.rerun = false
	b.Mu.Unlock()
	if rerun {
		b.Signal(src)
	}
}

// RunJob writes one job. The caller owns the lane's writes.
func (b *Batcher) RunJob(j LaneJob) {
	switch j.Kind {
	case JobLateCloses:
		b.postCloses(j.Closes)
	case JobGoodbye:
		if len(j.Opens) > 0 {
			err := b.postOpenSlots(j.Opens)
			b.Mu.Lock()
			b.openedLocked(j.Opens, err) // as an attach whose open the goodbye wrote, or failed to
			b.Mu.Unlock()
			if err != nil {
				return
			}
		}
		b.postCloses(j.Closes)
	case jobOpenGone:
		b.writeOpenGone(j.slot)
	case jobAbandon:
		b.writeAbandon(j.anchorID, j.session)
	case jobProbe:
		b.writeProbe()
	}
}

// postCloses writes CloseSlot records, in as many batches as need be.
func (b *Batcher) postCloses(closes []CloseReply) {
	b.postRecords(len(closes), muxwire.CloseSlotBodyLen, func(enc *muxwire.Encoder, i int) {
		enc.CloseSlot(closes[i].ID, 0, closes[i].Reason)
	})
}

// openedLocked records the result of posting opens and wakes the
// attaches that wait for it.
func (b *Batcher) openedLocked(opens []*OutSlot, err error) {
	for _, s := range opens {
		s.openErr, s.openDone = err, true
	}
	b.openPostedLocked()
}

// openPostedLocked wakes the attaches waiting for their OpenSlot.
func (b *Batcher) openPostedLocked() {
	if b.openCh != nil {
		close(b.openCh)
		b.openCh = nil
	}
}

// AwaitOpen waits until s's OpenSlot was posted (or dropped) by the
// lane's writer and returns the result. The caller does not hold b.mu.
func (b *Batcher) AwaitOpen(s *OutSlot) error {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	for !s.openDone {
		if b.openCh == nil {
			b.openCh = make(chan struct{})
		}
		ch := b.openCh
		b.Mu.Unlock()
		<-ch
		b.Mu.Lock()
	}
	return s.openErr
}
