//go:build ucx

package ucx

/*
#cgo pkg-config: ucx
#include "shim.h"
*/
import "C"

import "fmt"

// ucsStatus is a ucs_status_t.
type ucsStatus = C.ucs_status_t

const (
	statusOK         = C.UCS_OK
	statusInProgress = C.UCS_INPROGRESS
	statusBusy       = C.UCS_ERR_BUSY
	statusCanceled   = C.UCS_ERR_CANCELED
	statusRefused    = C.UCS_ERR_UNSUPPORTED
)

// statusText is UCX's own name for a status.
func statusText(st ucsStatus) string {
	return C.GoString(C.ucs_status_string(st))
}

// statusError wraps kind with the call that failed and UCX's status.
func statusError(kind error, call string, st ucsStatus) error {
	return fmt.Errorf("%w: %s: %s (%d)", kind, call, statusText(st), int(st))
}

// connectionLost reports the statuses UCX completes operations with when
// the peer behind an endpoint is gone (PEER error handling).
func connectionLost(st ucsStatus) bool {
	switch st {
	case C.UCS_ERR_ENDPOINT_TIMEOUT, C.UCS_ERR_CONNECTION_RESET,
		C.UCS_ERR_UNREACHABLE, C.UCS_ERR_NOT_CONNECTED, C.UCS_ERR_REJECTED,
		C.UCS_ERR_IO_ERROR:
		return true
	}
	return false
}

// errOf is the error an operation of kind completes with when UCX reports
// st; failed says the endpoint's error handler has already run, closing
// that the worker is tearing down.
func errOf(kind error, call string, st ucsStatus, failed, closing bool) error {
	switch {
	case st == statusOK:
		return nil
	case failed || connectionLost(st):
		return statusError(ErrEndpointFailed, call, st)
	case closing && st == statusCanceled:
		return statusError(ErrClosed, call, st)
	}
	return statusError(kind, call, st)
}

// The pre-parse's memory-type bound is this UCX's: a negative constant
// converted to uint fails the build if they differ.
const _ = uint(memTypeLast-C.UCS_MEMORY_TYPE_LAST) + uint(C.UCS_MEMORY_TYPE_LAST-memTypeLast)
