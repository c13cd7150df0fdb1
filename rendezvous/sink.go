package rendezvous

import (
	"fmt"
	"sync"
)

// sink is where a get puts its chunks: the caller's buffer, or one that
// grows with the bytes that arrive. The stated size is the owner's word,
// and a buffer of that size made before a byte arrived let one lying
// answer (1 TiB stated) kill the node. A grown buffer is made at the
// first chunk, firstGrowth long (or the stated size, if smaller), and
// grows growFactor times each time a chunk lands (or is announced) past
// its end, up to the stated size. A liar then costs nothing before its
// first chunk and at most growFactor times what it sent after firstGrowth
// (plus the chunks in flight). An honest payload up to firstGrowth is
// written once into one buffer; one up to growFactor*firstGrowth (64 MiB)
// pays one copy of firstGrowth bytes. The factor trades the two: at 4
// (and 1 MiB first) a 64 MiB get copied 21 MiB and allocated 85 MiB on
// its way; at 16 it copies 4 MiB and allocates 68, or 64 when its first
// buffer is one an earlier get grew out of (given back, spent.go). Buffers are
// not cleared (allocDest): a get writes every byte it gives.
//
// A chunk reaches the sink one of two ways: copied out of the transport's
// read buffer (write), or read by the transport straight from the socket
// into a region the sink gave (region, then fillDone). A buffer must not
// move while a transport writes into it, so growth waits until no region
// is being filled; region itself declines rather than wait (the chunk then
// comes the copying way), since it runs on a transport's reader.
type sink struct {
	mu    sync.Mutex // a grown buffer: chunks may land from more than one reader
	buf   []byte     // a grown buffer: len is the end of the furthest chunk written
	total int        // the stated size
	fixed bool       // buf is the caller's: no growth, no lock
	fills int        // regions handed out and still being filled
	first bool       // buf is a first buffer, given back when the sink grows out of it
	idle  sync.Cond  // signalled when fills drops to 0; L is &mu
}

func newSink(total int, into []byte) (*sink, error) {
	var s *sink
	if into != nil {
		if total > len(into) {
			return nil, fmt.Errorf("rendezvous: the payload of %d bytes does not fit a buffer of %d", total, len(into))
		}
		s = &sink{buf: into[:total], total: total, fixed: true}
	} else {
		s = &sink{total: total}
	}
	s.idle.L = &s.mu
	return s, nil
}

// allocDest makes an empty destination of capacity n (counted: a test
// seam). Its memory is not cleared (makeUncleared): every caller writes
// all of the bytes it gives out.
func allocDest(n int) []byte {
	fetchAllocs.Add(1)
	fetchAllocBytes.Add(int64(n))
	return makeUncleared(n)
}

// takeFirst gives an empty first buffer, one given back (see reachLocked)
// when there is one; a new one counts as a destination allocated.
func takeFirst() []byte {
	if b := takeSpent(firstGrowth); b != nil {
		return b
	}
	return allocDest(firstGrowth)
}

// write puts p at off; off+len(p) is within the stated size (the caller
// checked the chunk's length).
func (s *sink) write(off int, p []byte) {
	if s.fixed {
		copy(s.buf[off:], p)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	end := off + len(p)
	for end > cap(s.buf) && s.fills > 0 {
		s.idle.Wait()
	}
	s.reachLocked(end)
	copy(s.buf[off:], p)
}

// region gives the n bytes at off for a transport to fill, or nil when the
// buffer would have to move while another region is being filled. A
// region given must be followed by fillDone.
func (s *sink) region(off, n int) []byte {
	if s.fixed {
		return s.buf[off : off+n : off+n]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	end := off + n
	if end > cap(s.buf) && s.fills > 0 {
		return nil
	}
	s.reachLocked(end)
	s.fills++
	return s.buf[off:end:end]
}

// fillDone ends the fill of a region that region gave.
func (s *sink) fillDone() {
	if s.fixed {
		return
	}
	s.mu.Lock()
	s.fills--
	if s.fills == 0 {
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

// reachLocked makes buf long enough for a chunk ending at end, growing it
// (see sink) when it is not; no region is being filled when it grows.
func (s *sink) reachLocked(end int) {
	if s.buf == nil {
		// A buffer given back (spent.go) costs nothing new, so it may
		// hold the whole stated size from the first chunk.
		s.buf = takeSpent(s.total)
	}
	if end > cap(s.buf) {
		n := min(max(end, firstGrowth, growFactor*cap(s.buf)), s.total)
		if s.buf == nil && n == firstGrowth && s.total > firstGrowth {
			s.buf, s.first = takeFirst(), true
		} else {
			old := s.buf
			s.buf = append(allocDest(n), old...)
			grownBytes.Add(int64(len(old)))
			if s.first {
				// No region of it is being filled (growth waits for that)
				// and nothing else holds it: its bytes are in buf now.
				putSpent(old)
				s.first = false
			}
		}
	}
	if end > len(s.buf) {
		s.buf = s.buf[:end]
	}
}

// bytes is the payload once every chunk is in (never nil: a payload of
// no bytes has no chunk, so its buffer is made here).
func (s *sink) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf == nil {
		s.buf = allocDest(s.total)
	}
	return s.buf[:s.total:s.total] // capped: nothing past the payload is reachable
}
