package streamwire

import (
	"errors"
	"fmt"
)

// ErrMalformed wraps every error of a decoder in this package.
var ErrMalformed = errors.New("velo: malformed stream wire data")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}
