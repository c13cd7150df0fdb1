//go:build !linux

package streamsock

import (
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// newConnReader returns conn: raw reads are made on Linux only
// (rawread_linux.go).
func newConnReader(conn net.Conn) io.Reader { return conn }

func writeFd(fd uintptr, p []byte) (int, error) { return unix.Write(int(fd), p) }
