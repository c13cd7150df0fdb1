package bench

import (
	"io"
	"strings"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
