package messenger

import (
	"github.com/velo-go/velo/internal/msgerr"
)

// wireCode is what a reply carrying err says beyond its text: a code and a
// reason, or ok false for a plain error (a Nack or an error Response
// without headers, as the reference sends).
//
// A handler's own error (handlerError) never carries the reason of one of
// the messenger's sentinels, even when it wraps one (a downstream call
// that met ErrShuttingDown): the reason would tell the caller that this
// node is shutting down. Its code still goes.
func wireCode(err error) (msgerr.Code, string, bool) {
	if he, ok := err.(handlerError); ok {
		code, reason := msgerr.Classify(he.err)
		if _, own := msgerr.OwnByReason(reason); own {
			reason = ""
		}
		return code, reason, code != msgerr.Unknown || reason != ""
	}
	code, reason := msgerr.Classify(err)
	return code, reason, code != msgerr.Unknown || reason != ""
}
