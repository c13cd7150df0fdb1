package mux

import (
	"sync"
	"sync/atomic"
)

// Batch buffers. A batcher writes each batch into a buffer that the
// messenger hands to the transport without a copy; the transport copies
// a small frame into its own write buffer at once, or keeps a large one
// until it is written, and releases the buffer when done (ext.Owner). The
// buffer then returns to its batcher for the next batch. A steady stream
// of batches so allocates nothing: before, each batch cost two buffers of
// its size (the batch, and the messenger's copy of it).

// maxPooledBufs is how many idle buffers a batcher keeps.
const maxPooledBufs = 4

// batchBuf is one pooled batch buffer. A nil *batchBuf is valid: it
// allocates a buffer per batch and pools nothing (a mux whose post has
// no owned path, as in tests that keep the batches they see).
type batchBuf struct {
	pool *bufPool
	Buf  []byte
	refs atomic.Int32
	Keep bool // the bytes may outlive the references (a staged batch): never pooled
}

// bufPool is a batcher's idle buffers. Its lock is a leaf: Release runs
// on whatever goroutine the transport releases from.
type bufPool struct {
	Mu   sync.Mutex
	Free []*batchBuf
}

// TakeBuf returns a buffer holding one reference (the caller's), or nil
// when this mux sends without the owned path.
func (b *Batcher) TakeBuf() *batchBuf {
	if b.Mx.PostOwned == nil {
		return nil
	}
	p := &b.Bufs
	p.Mu.Lock()
	var ob *batchBuf
	if n := len(p.Free); n > 0 {
		ob = p.Free[n-1]
		p.Free[n-1] = nil
		p.Free = p.Free[:n-1]
	}
	p.Mu.Unlock()
	if ob == nil {
		ob = &batchBuf{pool: p}
	}
	ob.Keep = false
	ob.refs.Store(1)
	return ob
}

// bytes returns the empty buffer to encode into, of at least hint bytes.
func (ob *batchBuf) bytes(hint int) []byte {
	if ob == nil || cap(ob.Buf) < hint {
		return make([]byte, 0, hint)
	}
	return ob.Buf[:0]
}

// set records the batch encoded into ob, which may have grown its buffer.
func (ob *batchBuf) set(batch []byte) {
	if ob != nil {
		ob.Buf = batch
	}
}

// Retain and Release make batchBuf an ext.Owner.
func (ob *batchBuf) Retain() { ob.refs.Add(1) }

func (ob *batchBuf) Release() {
	if ob == nil || ob.refs.Add(-1) != 0 || ob.Keep {
		return
	}
	p := ob.pool
	p.Mu.Lock()
	if len(p.Free) < maxPooledBufs {
		p.Free = append(p.Free, ob)
	}
	p.Mu.Unlock()
}
