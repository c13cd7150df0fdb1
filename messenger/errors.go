package messenger

import (
	"strconv"

	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgwire"
)

// Errors of the messenger. Check them with errors.Is. They are defined in
// internal/msgerr, which also gives each its code and the reason that
// keeps its identity across the wire; velo re-exports them.
var (
	// ErrRequestTimeout: the call's context deadline passed before the
	// answer came. It also matches context.DeadlineExceeded.
	ErrRequestTimeout = msgerr.ErrRequestTimeout
	// ErrShuttingDown: this node, or the remote one, is shutting down.
	ErrShuttingDown = msgerr.ErrShuttingDown
	// ErrPeerNotRegistered: no route to the target instance.
	ErrPeerNotRegistered = msgerr.ErrPeerNotRegistered
	// ErrReservedName: handler names starting with '_' are for the system.
	ErrReservedName = msgerr.ErrReservedName
	// ErrDuplicateHandler: a handler of that name is already registered.
	ErrDuplicateHandler = msgerr.ErrDuplicateHandler
	// ErrNoResponseSlot: every response slot is waiting for an answer, and
	// UnaryAsync does not wait for one to free up.
	ErrNoResponseSlot = msgerr.ErrNoResponseSlot
	// ErrLaneFull: an ordered lane over its soft depth refused the message.
	ErrLaneFull = msgerr.ErrLaneFull
	// ErrUnknownHandler: the remote node has no handler of that name.
	ErrUnknownHandler = msgerr.ErrUnknownHandler
	// ErrOverloaded: the remote node runs as many handlers as it allows
	// and refused the request at once.
	ErrOverloaded = msgerr.ErrOverloaded
	// ErrPeerUnreachable: the connection to the peer was lost, so the call
	// will get no answer.
	ErrPeerUnreachable = msgerr.ErrPeerUnreachable
	// ErrPeerUntrusted: a TLS handshake with the peer failed on trust (its
	// certificate did not verify, or a peer authorizer refused it; see
	// tcp.WithTLS). It comes with ErrPeerUnreachable, and the error text
	// says why.
	ErrPeerUntrusted = msgerr.ErrPeerUntrusted
	// ErrPeerRestarted: the node at the peer's address is a new instance;
	// calls meant for the old one are failed, never delivered. Register the
	// new instance (or let discovery find it) to reach it.
	ErrPeerRestarted = msgerr.ErrPeerRestarted
	// ErrIdentityUnproven: the request came on a connection that did not
	// prove it speaks for the worker the request names (docs/faults.md,
	// "Hostile peers").
	ErrIdentityUnproven = msgerr.ErrIdentityUnproven
	// ErrStagedFetchTimeout: the receiver's staged fetch timeout
	// (velo.WithStagedFetchTimeout) ended the fetch of the request's
	// payload before it arrived.
	ErrStagedFetchTimeout = msgerr.ErrStagedFetchTimeout
)

// Causes of a handler context's end, as context.Cause reports them. A
// deadline that passed is context.DeadlineExceeded; this node's shutdown
// past its drain budget is ErrShuttingDown; a handler that returned leaves
// its context with context.Canceled.
var (
	// ErrCallerCancelled: the caller gave up on the call (its context was
	// cancelled) and said so. Only Go callers say so.
	ErrCallerCancelled = msgerr.ErrCallerCancelled
	// ErrCallerLost: the connection the request came on ended (the caller
	// died, shut down or lost its route), or the caller's instance was
	// found replaced by a new one. Nobody waits for the answer.
	ErrCallerLost = msgerr.ErrCallerLost
)

// appendErrorHeaders encodes the header map of an error Response: the
// code, and the reason when there is one. Keys go in sorted order, as
// EncodeHeaders writes them.
func appendErrorHeaders(b []byte, code msgerr.Code, reason string) []byte {
	n := byte(1)
	if reason != "" {
		n = 2
	}
	b = append(b, 0x80|n)
	b = msgwire.AppendStr(b, msgwire.CodeHeader)
	b = msgwire.AppendStr(b, strconv.FormatUint(uint64(code), 10))
	if reason != "" {
		b = msgwire.AppendStr(b, msgwire.ReasonHeader)
		b = msgwire.AppendStr(b, reason)
	}
	return b
}

// parseErrorHeaders reads the code and the reason from an error Response's
// header map. Junk is ignored, never fatal: a map that does not decode, or
// a code that is not a decimal number of 32 bits, reads as Unknown; a
// reason that is not a short name is dropped.
func parseErrorHeaders(hb []byte) (msgerr.Code, string) {
	if len(hb) == 0 {
		return msgerr.Unknown, ""
	}
	h, err := msgwire.DecodeHeaders(hb)
	if err != nil {
		return msgerr.Unknown, ""
	}
	code, ok := msgerr.ParseCode(h[msgwire.CodeHeader])
	if !ok || code == msgerr.OK {
		return msgerr.Unknown, "" // an error reply is never msgerr.OK
	}
	reason := h[msgwire.ReasonHeader]
	if !msgerr.ValidReason(reason) {
		reason = ""
	}
	return code, reason
}
