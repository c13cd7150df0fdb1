package streaming

import (
	"time"

	"github.com/velo-go/velo/internal/muxwire"
)

// The FlushLinger policy. A window opens when a record is staged and none
// is open; the staged data goes when it ends, or sooner when OnComplete or
// AtBytes says that more waiting cannot help. One timer per batcher,
// reused: nothing per record.

// lingerWakeLocked is called after a record was staged under FlushLinger:
// it opens the window if none is open, and says whether the batcher must
// write now.
func (b *batcher) lingerWakeLocked() bool {
	if b.awake {
		return false
	}
	if !b.windowArmed && !b.windowDue {
		b.armWindowLocked(b.mx.cfg.MaxLinger)
	}
	return b.earlyLocked(time.Now())
}

// lingerReadyLocked says whether staged data may go now under FlushLinger.
func (b *batcher) lingerReadyLocked() bool {
	return b.mx.cfg.Flush == FlushLinger && (b.windowDue || b.earlyLocked(time.Now()))
}

// earlyLocked is the window's early end: AtBytes staged, or, with
// OnComplete, a record staged on every live slot and the last data write
// at least a window ago (a record that comes too soon waits out the rest).
func (b *batcher) earlyLocked(now time.Time) bool {
	cfg := &b.mx.cfg
	if cfg.AtBytes > 0 && b.qBytes >= cfg.AtBytes {
		return true
	}
	if !cfg.OnComplete || b.live == 0 || b.staged < b.live {
		return false
	}
	if rest := cfg.MaxLinger - now.Sub(b.lastData); rest > 0 {
		if !b.windowArmed {
			b.armWindowLocked(rest)
		}
		return false
	}
	return true
}

func (b *batcher) armWindowLocked(d time.Duration) {
	b.windowArmed = true
	if b.windowT == nil {
		b.windowT = time.AfterFunc(d, b.windowEnd)
	} else {
		b.windowT.Reset(d)
	}
}

// windowEnd is the window timer: the staged data may go.
func (b *batcher) windowEnd() {
	b.mu.Lock()
	b.windowArmed, b.windowDue = false, true
	b.mu.Unlock()
	b.signal()
}

// dataWrittenLocked closes the window after a batch that carried data,
// and opens the next one for what is still staged.
func (b *batcher) dataWrittenLocked() {
	b.lastData = time.Now()
	if b.mx.cfg.Flush != FlushLinger {
		return
	}
	b.windowDue = false
	if b.windowArmed {
		b.windowT.Stop()
		b.windowArmed = false
	}
	if b.staged > 0 {
		b.armWindowLocked(b.mx.cfg.MaxLinger)
	}
}

// sizeHint is the capacity for the next batch buffer: a quarter more than
// the last batch, within the batch cap. Its lock is held.
func (b *batcher) sizeHint() int {
	return min(max(512, b.lastLen+b.lastLen/4), b.mx.cfg.MaxBatchBytes+muxwire.BatchHeaderLen+muxwire.RecordHeaderLen)
}

// takeSingletonTag returns the tag of the batch just built, if any.
func (b *batcher) takeSingletonTag() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.singletonTag
	b.singletonTag = ""
	return t
}
