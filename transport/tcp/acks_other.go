//go:build !linux

package tcp

import (
	"io"
	"net"
)

// Inbound reads accepted connections as they are: ACK tuning is Linux only.
func (n *network) Inbound(conn net.Conn) io.Reader { return conn }
