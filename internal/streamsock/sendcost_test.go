package streamsock

import (
	"context"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

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

// refOwner counts the references taken and let go on a frame's Owner.
type refOwner struct{ retained, released atomic.Int64 }

func (o *refOwner) Retain()  { o.retained.Add(1) }
func (o *refOwner) Release() { o.released.Add(1) }

// TestCopiedFramesAreNotRetained: a small frame admitted at once is copied
// within Send, so the transport takes no reference on its Owner (two
// atomic updates of a pooled request buffer per message, and the buffer's
// cache line bouncing to the writer). A large frame, whose payload is
// written in place, is held until it is written, and then let go.
func TestCopiedFramesAreNotRetained(t *testing.T) {
	tx, rx := pair(t)
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	small := &refOwner{}
	const n = 200
	admitted := 0
	for i := range n {
		out, err := tx.t.Send(rx.id, ext.Frame{Type: ext.Message, Payload: make([]byte, 64), Owner: small})
		if err != nil {
			t.Fatal(err)
		}
		if out.Admitted() {
			admitted++
		}
		waitCount(t, &got, int64(i+1))
	}
	if admitted == 0 {
		t.Fatal("no send was admitted at once")
	}
	// Only a frame that waited in the gate may have been held.
	if r := small.retained.Load(); r > int64(n-admitted) {
		t.Fatalf("%d references taken for %d frames, %d of them admitted at once", r, n, admitted)
	}
	large := &refOwner{}
	if _, err := tx.t.Send(rx.id, ext.Frame{Type: ext.Message, Payload: make([]byte, 256<<10), Owner: large}); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &got, n+1)
	for deadline := time.Now().Add(20 * time.Second); large.released.Load() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("a large frame's owner: %d released", large.released.Load())
		}
		runtime.Gosched()
	}
	if small.retained.Load() != small.released.Load() || large.retained.Load() != 1 {
		t.Fatalf("references: small %d taken, %d let go; large %d taken",
			small.retained.Load(), small.released.Load(), large.retained.Load())
	}
}
