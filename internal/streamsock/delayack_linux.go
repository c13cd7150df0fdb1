package streamsock

import "golang.org/x/sys/unix"

const delayAcksSupported = true

// setDelayAcks puts the socket in delayed-acknowledgement (ping-pong) mode.
// A failure costs only the acknowledgements it would have saved.
func setDelayAcks(fd uintptr) {
	unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 0)
}
