package mux

// What woke a batcher (velo_streaming_mux_batcher_wakes_total{source}).
// Whoever signals sets its source's bit before the token goes on the
// channel; the goroutine swaps the bits to zero as it starts the pass and
// counts the wake once, for the first source in MuxWakeSource order. That
// is one atomic OR per signal and one swap and one add per wake: a signal
// happens only when the batcher is asleep, so never once per record.

import (
	"math/bits"

	"github.com/velo-go/velo/metrics"
)

// Signal wakes the batcher's goroutine for src; a wake already pending is
// enough (its bits then carry src too).
func (b *Batcher) Signal(src metrics.MuxWakeSource) {
	b.wakeBy.Or(1 << src)
	select {
	case b.Wake <- struct{}{}:
	default:
	}
}

// countWake counts the wake that starts a pass: timer is true when the
// goroutine's own reply-linger timer woke it, not the channel. The bits
// are cleared either way, since the pass serves every signal before it.
// A wake whose bits a racing pass already took (a signal that set its bit
// before that pass swapped, and sent its token after the pass drained
// the channel) has none left and counts as a frame, the common source.
func (b *Batcher) countWake(timer bool) {
	set := b.wakeBy.Swap(0)
	src := metrics.WakeFrame
	switch {
	case timer:
		src = metrics.WakeLinger
	case set != 0:
		src = metrics.MuxWakeSource(bits.TrailingZeros32(set))
	}
	n := &b.Mx.N
	n.BatcherWakes.Add(1)
	n.WakesBy[src].Add(1)
	b.lastWake = src
}
