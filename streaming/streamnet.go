package streaming

import (
	"context"
	"net"
)

// streamNet is how the per-stream path listens and dials: TCP unless a
// test sets another with withStreamNet (an in-memory network, so that two
// nodes run inside a testing/synctest bubble, where a goroutine blocked on
// a real socket would keep the fake clock from moving).
type streamNet interface {
	Listen(addr string) (net.Listener, error)
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// tcpStreams is the per-stream path's network outside tests.
type tcpStreams struct{}

func (tcpStreams) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

func (tcpStreams) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// withStreamNet sets the per-stream path's network, for tests.
func withStreamNet(n streamNet) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.streams = n }}
}
