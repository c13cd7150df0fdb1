package mux

import (
	"time"

	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/metrics"
)

// The FlushLinger policy. A window opens when a record is staged and none
// is open; the staged data goes when it ends, or sooner when OnComplete or
// AtBytes says that more waiting cannot help. One timer per batcher,
// reused: nothing per record.

// lingerWakeLocked is called after a record was staged under FlushLinger:
// it opens the window if none is open, and says whether the batcher must
// write now.
func (b *Batcher) lingerWakeLocked() bool {
	if b.Awake {
		return false
	}
	if !b.WindowArmed && !b.windowDue {
		b.armWindowLocked(b.Mx.Cfg.MaxLinger)
	}
	return b.earlyLocked(time.Now())
}

// lingerReadyLocked says whether staged data may go now under FlushLinger.
func (b *Batcher) lingerReadyLocked() bool {
	return b.Mx.Cfg.Flush == FlushLinger && (b.windowDue || b.earlyLocked(time.Now()))
}

// earlyLocked is the window's early end: AtBytes staged, or, with
// OnComplete, a record staged on every live slot and the last data write
// at least a window ago (a record that comes too soon waits out the rest).
func (b *Batcher) earlyLocked(now time.Time) bool {
	cfg := &b.Mx.Cfg
	if cfg.AtBytes > 0 && b.qBytes >= cfg.AtBytes {
		return true
	}
	if !cfg.OnComplete || b.live == 0 || b.staged < b.live {
		return false
	}
	if rest := cfg.MaxLinger - now.Sub(b.lastData); rest > 0 {
		if !b.WindowArmed {
			b.armWindowLocked(rest)
		}
		return false
	}
	return true
}

func (b *Batcher) armWindowLocked(d time.Duration) {
	b.WindowArmed = true
	if b.windowT == nil {
		b.windowT = time.AfterFunc(d, b.windowEnd)
	} else {
		b.windowT.Reset(d)
	}
}

// windowEnd is the window timer: the staged data may go.
func (b *Batcher) windowEnd() {
	b.Mu.Lock()
	b.WindowArmed, b.windowDue = false, true
	b.Mu.Unlock()
	b.Signal(metrics.WakeLinger)
}

// dataWrittenLocked closes the window after a batch that carried data,
// and opens the next one for what is still staged.
func (b *Batcher) dataWrittenLocked() {
	b.lastData = time.Now()
	if b.Mx.Cfg.Flush != FlushLinger {
		return
	}
	b.windowDue = false
	if b.WindowArmed {
		b.windowT.Stop()
		b.WindowArmed = false
	}
	if b.staged > 0 {
		b.armWindowLocked(b.Mx.Cfg.MaxLinger)
	}
}

// sizeHint is the capacity for the next batch buffer: a quarter more than
// the last batch, within the batch cap. Its lock is held.
func (b *Batcher) sizeHint() int {
	return min(max(512, b.lastLen+b.lastLen/4), b.Mx.Cfg.MaxBatchBytes+muxwire.BatchHeaderLen+muxwire.RecordHeaderLen)
}

// takeSingletonTag returns the tag of the batch just built, if any.
func (b *Batcher) takeSingletonTag() string {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	t := b.singletonTag
	b.singletonTag = ""
	return t
}
