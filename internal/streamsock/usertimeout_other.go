//go:build !linux

package streamsock

import (
	"syscall"
	"time"
)

// UserTimeout: see usertimeout_linux.go. Other systems have no
// TCP_USER_TIMEOUT; their kernel's retransmission limits apply.
const UserTimeout = 30 * time.Second

// SetUserTimeout does nothing where TCP_USER_TIMEOUT does not exist.
func SetUserTimeout(syscall.RawConn, time.Duration) error { return nil }
