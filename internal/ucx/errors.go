package ucx

import "errors"

// The errors of the binding. Every error an operation returns or completes
// with matches one of them with errors.Is; the text adds the UCX call and
// status where UCX gave one.
var (
	// ErrClosed: the worker is closed or closing. Operations still
	// outstanding when Close gives up waiting are answered with it.
	ErrClosed = errors.New("ucx: worker closed")
	// ErrEndpointFailed: the endpoint's peer is gone (UCX ran the
	// endpoint's error handler, or completed an operation with a
	// connection status). The endpoint stays failed; Connect again.
	ErrEndpointFailed = errors.New("ucx: endpoint failed")
	// ErrBadRkey: a packed remote key was empty, longer than MaxRkeyLen,
	// not framed as a UCX packed key, or refused by ucp_ep_rkey_unpack.
	ErrBadRkey = errors.New("ucx: bad remote key")
	// ErrGetFailed: a GET was refused before it was posted (zero length, an
	// address range that wraps, a destination being unmapped) or UCX failed
	// it for a reason other than the endpoint's loss.
	ErrGetFailed = errors.New("ucx: GET failed")
	// ErrSendFailed: UCX failed an Active Message send for a reason other
	// than the endpoint's loss, or refused it before posting (a header over
	// MaxAMHeader).
	ErrSendFailed = errors.New("ucx: send failed")
	// ErrNoEndpoint: the EndpointID was never returned by this worker's
	// Connect, or CloseEndpoint has closed it.
	ErrNoEndpoint = errors.New("ucx: no such endpoint")
	// ErrUnmapped: the Mem has been unmapped.
	ErrUnmapped = errors.New("ucx: memory unmapped")
	// ErrProgressThread: a call that waits for the progress thread was
	// made on it (from an Active Message handler or a done function), where
	// it would wait for itself.
	ErrProgressThread = errors.New("ucx: blocking call on the progress thread")
)
