package fs

import (
	"os"
	"time"
)

// changeCheckInterval is how often a watch looks at the file's identity,
// size and modification time between two full reads. A stat costs one
// syscall and no parsing, so a watch sees a registration within this
// interval while it still reads the whole file (and the liveness locks,
// which change without the file changing) only every PollInterval.
const changeCheckInterval = 100 * time.Millisecond

// fileState remembers what a stat of the file said last time.
type fileState struct {
	path string
	last os.FileInfo // nil while the file is missing
}

// changed stats the file and reports whether it differs from the last
// stat. Writers replace the file by a rename, so each write gives a new
// inode; size and modification time catch a writer that edits in place.
func (s *fileState) changed() bool {
	fi, err := os.Stat(s.path)
	if err != nil {
		fi = nil
	}
	old := s.last
	s.last = fi
	if old == nil || fi == nil {
		return old != fi // appeared or vanished
	}
	return !os.SameFile(old, fi) || old.Size() != fi.Size() || !old.ModTime().Equal(fi.ModTime())
}

// checkEvery is the tick of a watch that reads the file fully every full.
func checkEvery(full time.Duration) time.Duration { return min(full, changeCheckInterval) }
