package streamsock

import "syscall"

// SetBuffers sets SO_SNDBUF and SO_RCVBUF on a socket that is not yet
// listening or connected. Setting them later turns off receive autotuning
// on Linux after the window has grown, which collapses it for the life of
// the connection.
func SetBuffers(c syscall.RawConn, bytes int) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, bytes); serr != nil {
			return
		}
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, bytes)
	})
	if err != nil {
		return err
	}
	return serr
}
