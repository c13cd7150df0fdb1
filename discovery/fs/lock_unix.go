//go:build unix

package fs

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path, creating it if needed. The
// lock lives on a side file, not on the data file: the data file is
// replaced by rename, and a lock on a replaced inode guards nothing.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// holdFile creates path and holds an exclusive flock on it until release.
// The kernel drops the lock when the process dies, however it dies, which
// is what tells readers the holder is gone. A reader that took the lock of
// a dead holder may unlink the file meanwhile; then the lock guards an
// orphaned inode, so holdFile checks and starts again.
func holdFile(path string) (release func(), err error) {
	for range 8 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s is held by a live process: %w", path, err)
		}
		if sameFile(f, path) {
			return func() {
				os.Remove(path)
				f.Close() // drops the lock
			}, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("%s: kept being removed while taken", path)
}

func sameFile(f *os.File, path string) bool {
	held, err1 := f.Stat()
	now, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(held, now)
}

// heldBy reports whether a live process holds path. A missing file is
// an entry without liveness (one written by the reference, or by an older
// version) and counts as held. When nobody holds it, reap is set: it
// removes the file, and must be called after the entry is gone.
func heldBy(path string) (held bool, reap func()) {
	f, err := os.Open(path)
	if err != nil {
		return true, nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return true, nil
	}
	return false, func() {
		if sameFile(f, path) {
			os.Remove(path)
		}
		f.Close()
	}
}
