package frame

import (
	"math/bits"
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

// Retain adds a reference. Retaining a chunk whose last reference is gone
// means a frame was used after its release: that is a bug in the caller,
// and going on would hand the same memory to two readers.
func (c *Chunk) Retain() {
	if c.refs.Add(1) <= 1 {
		panic("frame: frame used after its buffer was released")
	}
}

// Release drops a reference; the last one returns the chunk to its pool.
func (c *Chunk) Release() { c.ReleaseN(1) }

// ReleaseN drops n references at once.
func (c *Chunk) ReleaseN(n int) {
	if n := c.refs.Add(-int64(n)); n == 0 {
		putChunk(c)
	} else if n < 0 {
		panic("frame: chunk released more often than referenced")
	}
}

const (
	minChunkShift = 12 // 4 KiB
	maxChunkShift = 31
)

// chunkPools are bounded free lists, one per size class. They are channels
// rather than sync.Pools because a sync.Pool is emptied at every GC, and a
// busy reader would then allocate a fresh chunk after each collection,
// which in turn brings the next collection closer.
var chunkPools [maxChunkShift - minChunkShift + 1]chan *Chunk

// pooledBytesPerClass bounds the memory each size class keeps idle, and
// maxPooledPerClass the number of chunks (so the small classes' free lists
// stay short).
const (
	pooledBytesPerClass = 32 << 20
	maxPooledPerClass   = 1024
)

func init() {
	for i := range chunkPools {
		chunkPools[i] = make(chan *Chunk, min(maxPooledPerClass, max(2, pooledBytesPerClass>>(i+minChunkShift))))
	}
}

func putChunk(c *Chunk) {
	select {
	case chunkPools[c.class] <- c:
	default: // the free list is full: leave the chunk to the GC
	}
}

// chunkClass is the size class of the smallest chunk of at least size bytes.
func chunkClass(size int) int {
	if size <= 1<<minChunkShift {
		return 0
	}
	return bits.Len(uint(size-1)) - minChunkShift
}

// chunkBytes is the length of the chunk getChunk(size) returns.
func chunkBytes(size int) int { return 1 << (chunkClass(size) + minChunkShift) }

// getChunk returns a chunk of at least size bytes, biased for its reader.
func getChunk(size int) *Chunk {
	class := chunkClass(size)
	var c *Chunk
	select {
	case c = <-chunkPools[class]:
	default:
		c = &Chunk{buf: make([]byte, 1<<(class+minChunkShift)), class: class}
	}
	c.refs.Store(readBias)
	return c
}

// leave drops the reader's bias, keeping one reference per frame handed out.
func (c *Chunk) leave(handed int64) {
	if n := c.refs.Add(handed - readBias); n == 0 {
		putChunk(c)
	}
}
