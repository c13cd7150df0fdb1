package frame

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// readBias keeps a chunk's count far from zero while its reader still
// hands out frames from it, so the reader pays no atomic per frame: only
// the consumers' releases touch the count. When the reader leaves the chunk
// it takes back the bias minus the frames it handed out.
const readBias = 1 << 30

// Chunk is a pooled read buffer shared by the frames read into it. It
// implements ext.Owner.
type Chunk struct {
	buf   []byte
	refs  atomic.Int64
	class int
}

// Retain adds a reference.
func (c *Chunk) Retain() { c.refs.Add(1) }

// Release drops a reference; the last one returns the chunk to its pool.
func (c *Chunk) Release() {
	if n := c.refs.Add(-1); n == 0 {
		chunkPools[c.class].Put(c)
	} else if n < 0 {
		panic("frame: chunk released more often than referenced")
	}
}

const (
	minChunkShift = 16 // 64 KiB
	maxChunkShift = 31
)

var chunkPools [maxChunkShift - minChunkShift + 1]sync.Pool

// getChunk returns a chunk of at least size bytes, biased for its reader.
func getChunk(size int) *Chunk {
	class := 0
	if size > 1<<minChunkShift {
		class = bits.Len(uint(size-1)) - minChunkShift
	}
	c, _ := chunkPools[class].Get().(*Chunk)
	if c == nil {
		c = &Chunk{buf: make([]byte, 1<<(class+minChunkShift)), class: class}
	}
	c.refs.Store(readBias)
	return c
}

// leave drops the reader's bias, keeping one reference per frame handed out.
func (c *Chunk) leave(handed int64) {
	if n := c.refs.Add(handed - readBias); n == 0 {
		chunkPools[c.class].Put(c)
	}
}
