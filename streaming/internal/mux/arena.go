package mux

import (
	"unsafe"

	wire "github.com/velo-go/velo/internal/streamwire"
)

// Small byte items are encoded into a per-slot arena that is reused once
// every record in it has gone into a batch (the encoder copies them): a
// steady stream of tokens then allocates nothing per record.
const (
	maxArenaFrame = 1 << 10 // larger records get a buffer of their own
	arenaSize     = 2 << 10 // one size, so that any free arena fits the next need
)

// maxFreeArenas bounds the arenas and queue arrays a batcher keeps for
// its next slots.
const maxFreeArenas = 256

// RecycleLocked takes s's queue array and arenas for the batcher's next
// slots. The caller holds b.mu, and no queued record of s is left to send.
func (b *Batcher) RecycleLocked(s *OutSlot) {
	if s.Q != nil && len(b.freeQueues) < maxFreeArenas {
		clear(s.Q[:cap(s.Q)])
		b.freeQueues = append(b.freeQueues, s.Q[:0])
	}
	for _, a := range [][]byte{s.Arena, s.spare} {
		if cap(a) == arenaSize && len(b.freeArenas) < maxFreeArenas {
			b.freeArenas = append(b.freeArenas, a[:0])
		}
	}
	s.Q, s.Arena, s.spare = nil, nil, nil
}

// queueLocked is an empty queue array for a new slot.
func (b *Batcher) queueLocked() [][]byte {
	if n := len(b.freeQueues); n > 0 {
		q := b.freeQueues[n-1]
		b.freeQueues[n-1] = nil
		b.freeQueues = b.freeQueues[:n-1]
		return q
	}
	return make([][]byte, 0, min(b.Mx.Cfg.inletRecords()+1, 64))
}

// arenaLocked is an empty arena, a freed one when the batcher has one.
func (b *Batcher) arenaLocked() []byte {
	if n := len(b.freeArenas); n > 0 {
		a := b.freeArenas[n-1]
		b.freeArenas[n-1] = nil
		b.freeArenas = b.freeArenas[:n-1]
		return a
	}
	return make([]byte, 0, arenaSize)
}

// ArenaFrameLocked encodes the byte item of payload (n bytes) into the
// arena and returns it. A full arena is set aside, not grown, since the
// records queued from it point into it; the one set aside before it is
// reused once none of them is queued any more, so a slot whose queue
// never empties (a stream held back by credit) still allocates only
// while its records in flight outgrow its two arenas.
func (s *OutSlot) ArenaFrameLocked(payload []byte, n int) []byte {
	if cap(s.Arena)-len(s.Arena) < n {
		next := s.spare[:0]
		if cap(next) < n || s.queuedIn(s.spare) {
			next = s.B.arenaLocked()
		}
		s.Arena, s.spare = next, s.Arena
	}
	start := len(s.Arena)
	s.Arena = wire.AppendBytesItem(s.Arena, payload)
	end := len(s.Arena)
	return s.Arena[start:end:end]
}

// queuedIn says whether a record in s's queue lies in arena's memory.
func (s *OutSlot) queuedIn(arena []byte) bool {
	if cap(arena) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(arena)))
	hi := lo + uintptr(cap(arena))
	for _, rec := range s.Q {
		if len(rec) == 0 {
			continue
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(rec))); p >= lo && p < hi {
			return true
		}
	}
	return false
}
