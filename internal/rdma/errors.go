package rdma

import (
	"errors"
	"fmt"
)

// Errors of the registry. Each is matched with errors.Is.
var (
	// ErrBudget: the registered-bytes budget cannot take the request. It
	// is a routine refusal: the caller uses plain memory.
	ErrBudget = errors.New("rdma: registered-bytes budget spent")
	// ErrPoolExhausted: the pool could not give memory for another reason
	// (a map failed, or, for transparent staging, no mapped arena had room).
	ErrPoolExhausted = errors.New("rdma: pool exhausted")
	// ErrBadRange: a range that is empty, wraps, or is outside the
	// caller's registered length.
	ErrBadRange = errors.New("rdma: bad range")
	// ErrDeregistered: the region is being deregistered or is gone.
	ErrDeregistered = errors.New("rdma: region deregistered")
	// ErrReleased: the staging or buffer was released.
	ErrReleased = errors.New("rdma: released")
	// ErrMapFailed: the backend refused to map the memory.
	ErrMapFailed = errors.New("rdma: map failed")
	// ErrNotOwned: UnregisterOwned on a guard of RegisterExternal.
	ErrNotOwned = errors.New("rdma: region is not registry-owned")
)

// RegisterOwnedError is RegisterOwned's refusal. It carries the buffer
// back, untouched, so a refusal (often ErrBudget, a routine one) does not
// cost the caller its allocation.
type RegisterOwnedError struct {
	Buf []byte
	Err error
}

func (e *RegisterOwnedError) Error() string {
	return fmt.Sprintf("rdma: register owned buffer of %d bytes: %v", len(e.Buf), e.Err)
}

func (e *RegisterOwnedError) Unwrap() error { return e.Err }
