package tcpframe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// sender is the producer's end: one connection, written by the node's
// pump, and a watcher blocked in a Read, which is how the consumer's
// close is seen (the consumer never writes).
type sender struct {
	conn    net.Conn
	buf     []byte // the batch being written, kept between batches
	closed  chan struct{}
	watched chan struct{} // closed when the watcher returns
	once    sync.Once
}

func newSender(conn net.Conn) *sender {
	s := &sender{conn: conn, closed: make(chan struct{}), watched: make(chan struct{})}
	go s.watch()
	return s
}

// watch waits for the connection's end. Any return of Read is one: the
// consumer closed it (or wrote, which it must not), or Close did. It
// closes the connection then, so that a write blocked on a consumer that
// is gone fails now, and before Closed says so: a Send that follows
// Closed must fail, not land in the socket's buffer.
func (s *sender) watch() {
	defer close(s.watched)
	var b [1]byte
	s.conn.Read(b[:])
	s.conn.Close()
	close(s.closed)
}

// Send writes every frame of the batch in one write.
func (s *sender) Send(frames [][]byte) error {
	buf := s.buf[:0]
	for _, f := range frames {
		if len(f) > wire.MaxTCPFrame {
			return fmt.Errorf("%w: stream frame of %d bytes exceeds %d", ext.ErrFrameTooLarge, len(f), wire.MaxTCPFrame)
		}
		buf = wire.AppendTCPFrame(buf, f)
	}
	_, err := s.conn.Write(buf)
	if cap(buf) > 1<<20 {
		buf = nil // a large item's buffer is not kept for the rest of the stream
	}
	s.buf = buf
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("%w: %w", ext.ErrStreamClosed, err)
		}
		return err
	}
	return nil
}

// Finish has nothing to wait for: the terminal's write succeeded, which
// is what the reference's TCP path confirms.
func (s *sender) Finish(context.Context) error { return nil }

func (s *sender) Closed() <-chan struct{} { return s.closed }

// Close closes the connection and waits for the watcher.
func (s *sender) Close() error {
	s.once.Do(func() { s.conn.Close() })
	<-s.watched
	return nil
}

// Conn is the stream's connection, for tests that cut it.
func (s *sender) Conn() net.Conn { return s.conn }
