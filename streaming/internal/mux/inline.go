package mux

// FlushBatch writes on the caller's goroutine. An engine that stages one
// token on every stream of a forward pass and then calls FlushBatch woke
// the batcher's goroutine once a pass for the one write of the pass; with
// a P idle the Go scheduler pays for that wake with a futex call and a
// thread that wakes, steals the goroutine, writes and parks again, and
// between processes that was a good part of the engine's CPU per token.
// So when the lane is free and the batcher asleep, Kick builds and posts
// the pass itself, as the lane's writer (writer.go), and wakes nothing.
//
// FlushBatch never blocks, so the inline writer posts without waiting for
// admission (Mux.PostOwnedNoWait). A batch the transport parks in its
// admission gate, or one that must go by a path that waits (a staged
// singleton, a mux without the owned path), hands the rest of the flush
// and the lane's writes to a goroutine of its own, which waits as the
// batcher's goroutine would and then goes on. That is rare: a congested
// peer, or a record larger than a batch.

import (
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/metrics"
)

// inlineLocked takes the lane's writes for an inline flush if it may: the
// batcher's goroutine lives and is asleep, the lane is free, something is
// ready and the mux can post without waiting. It marks the batcher awake,
// as a wake does, so that Sends during the flush do not wake it. The
// caller holds b.mu; on true it calls flushOwned(true).
func (b *Batcher) inlineLocked() bool {
	if b.Mx.PostOwnedNoWait == nil || b.Awake || len(b.Ready) == 0 || b.goneLocked() || !b.OwnLocked() {
		return false
	}
	b.Awake = true
	b.Mx.N.InlineFlushes.Add(1)
	return true
}

// postNoWait posts a batch of an inline flush. posted is false when the
// batch must go by a path that may wait; adm is the pending admission of
// a batch parked in the transport's gate.
func (b *Batcher) postNoWait(batch []byte, tag string, ob *batchBuf) (adm *ext.Admission, err error, posted bool) {
	mx := b.Mx
	if tag != "" || ob == nil || (mx.StagesAbove > 0 && len(batch) > mx.StagesAbove) {
		return nil, nil, false
	}
	adm, err = mx.PostOwnedNoWait(b.peer, b.Lane, batch, ob)
	if err == nil && adm == nil {
		mx.countSent(batch, "")
	}
	return adm, err, true
}

// finishInline is the rest of an inline flush whose batch would wait: it
// waits for the batch's admission (or posts it by the waiting path), then
// goes on as the batcher's goroutine does. It owns the lane's writes.
func (b *Batcher) finishInline(batch []byte, tag string, ob *batchBuf, adm *ext.Admission, retired, opened []*OutSlot, more bool) {
	var err error
	if adm == nil {
		err = b.Mx.sendOwned(b.peer, b.Lane, batch, tag, ob)
	} else {
		<-adm.Done()
		if err = adm.Err(); err == nil {
			b.Mx.countSent(batch, tag)
		}
	}
	ob.Release()
	if b.settlePost(err, retired, opened) && more {
		b.flushOwned(false)
	} else {
		b.Release()
	}
	b.lingerStaged()
}

// releaseInline lets go of the writes an inline flush took. Work queued
// for the owner meanwhile (an attach's OpenSlot, a lane job) is written by
// paths that may wait for admission, so it is left to the batcher's
// goroutine, woken for it; only once that goroutine is gone does the
// caller write it, as any queuer then would.
func (b *Batcher) releaseInline() {
	b.Mu.Lock()
	queued := len(b.jobs) > 0 || (b.OpenWaiters > 0 && len(b.Opens) > 0)
	if !queued || b.goneLocked() {
		b.Mu.Unlock()
		b.Release()
		return
	}
	b.writing = false
	src := metrics.WakeControl
	if b.rerun {
		src = b.rerunSrc
	}
	b.rerun = false
	b.Mu.Unlock()
	b.Signal(src)
}
