package streamsock

import (
	"context"
	"net"
	"testing"

	"github.com/velo-go/velo/ext"
)

// nullNet dials connections whose writes succeed at once without a system
// call, so a benchmark measures the send path and the writer loop alone.
type nullNet struct{ tcpNet }

type nullConn struct {
	net.Conn
	closed chan struct{}
}

func (c *nullConn) Write(b []byte) (int, error) { return len(b), nil }
func (c *nullConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return c.Conn.Close()
}

func (nullNet) Dial(ctx context.Context, ep []byte) (net.Conn, error) {
	c, err := tcpNet{}.Dial(ctx, ep)
	if err != nil {
		return nil, err
	}
	return &nullConn{Conn: c, closed: make(chan struct{})}, nil
}

// BenchmarkSendPathOnly is the CPU cost of Send for a 64 B frame plus the
// writer's share, with writes that cost nothing.
func BenchmarkSendPathOnly(b *testing.B) {
	rx := newNode(b, Config{})
	cfg := Config{Key: "tcp"}
	tr, err := New(nullNet{}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	a := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{})
	if _, err := tr.Start(context.Background(), a); err != nil {
		b.Fatal(err)
	}
	defer func() { tr.Shutdown(); <-tr.Closed(); a.Close() }()
	if err := tr.Register(rx.info()); err != nil {
		b.Fatal(err)
	}
	f := ext.Frame{Type: ext.Message, Payload: make([]byte, 64)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tr.Send(rx.id, f); err != nil {
			b.Fatal(err)
		}
	}
}
