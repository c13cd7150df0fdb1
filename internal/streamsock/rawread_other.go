//go:build !linux

package streamsock

import (
	"io"
	"net"
)

// newConnReader returns conn: raw reads are made on Linux only
// (rawread_linux.go).
func newConnReader(conn net.Conn) io.Reader { return conn }
