//go:build unix

package fs

import (
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
