package quic

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
)

// finishGrace bounds how long a closing connection waits for its peer to
// take what it wrote: a QUIC close discards what the peer has not
// acknowledged, where a TCP close would still deliver it.
const finishGrace = time.Second

// streamConn is one QUIC connection's single bidirectional stream seen as
// a net.Conn, which is what the shared stream-socket transport drives.
//
// Ends map onto what that transport expects of a socket: the peer's FIN is
// io.EOF; the peer closing the connection is io.EOF too (for a listener
// that is how a dialer's connection ends after its reader finished, and
// for a dialer a listener that went); a stream reset is ECONNRESET.
type streamConn struct {
	n      *network
	qc     *quic.Conn
	st     *quic.Stream
	dialed bool

	finished atomic.Bool   // CloseWrite ran: our FIN is queued
	sawEOF   atomic.Bool   // the peer's FIN was read
	eof      chan struct{} // closed when sawEOF is first set
	eofOnce  sync.Once
	once     sync.Once

	// quic-go's Stream.Close while a Write is blocked leaves that Write
	// blocked for good (the stream counts as finished, so the connection's
	// end no longer fails it). So Close and CloseWrite look at whether a
	// Write is in progress, and a Close during one resets the stream
	// instead, which wakes the Write with an error.
	wmu     sync.Mutex
	writes  int  // Writes in progress
	closing bool // Close or CloseWrite ran: no new Write
}

func (c *streamConn) Read(p []byte) (int, error) {
	n, err := c.st.Read(p)
	if err != nil {
		err = c.mapErr(err)
	}
	return n, err
}

func (c *streamConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	if c.closing {
		c.wmu.Unlock()
		return 0, net.ErrClosed
	}
	c.writes++
	c.wmu.Unlock()
	n, err := c.st.Write(p)
	c.wmu.Lock()
	c.writes--
	c.wmu.Unlock()
	if err != nil {
		err = c.mapErr(err)
	}
	return n, err
}

// errPeerClosed is the end of a connection that the peer closed.
var errPeerClosed = errors.New("quic: the peer closed the connection")

// errIdle is a connection that heard nothing for the idle timeout.
var errIdle = errors.New("quic: no packet from the peer within the idle timeout")

func (c *streamConn) mapErr(err error) error {
	if errors.Is(err, io.EOF) {
		c.sawEOF.Store(true)
		c.eofOnce.Do(func() { close(c.eof) })
		return io.EOF
	}
	var ae *quic.ApplicationError
	var se *quic.StreamError
	var ie *quic.IdleTimeoutError
	switch {
	case errors.As(err, &ae) && ae.Remote:
		return fmt.Errorf("%w: %w (%v)", errPeerClosed, io.EOF, err)
	case errors.As(err, &se) && se.Remote:
		return fmt.Errorf("quic: the peer reset the stream: %w (%v)", syscall.ECONNRESET, err)
	case errors.As(err, &ie):
		// Not left as it is: an idle timeout is a net.Error whose Timeout
		// is true, and must not read as a passed read deadline.
		return fmt.Errorf("%w (%v)", errIdle, err)
	}
	return err
}

// CloseWrite finishes the stream: the peer reads io.EOF after what was
// written. The listener's goodbye uses it.
func (c *streamConn) CloseWrite() error {
	if !c.stopWrites() {
		return errWriteBusy
	}
	c.finished.Store(true)
	return c.st.Close()
}

// errWriteBusy refuses a CloseWrite while a Write is in progress.
var errWriteBusy = errors.New("quic: a write is in progress")

// stopWrites turns away later Writes and reports whether none is in
// progress, so the stream may be finished.
func (c *streamConn) stopWrites() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.closing = true
	return c.writes == 0
}

// Close ends the connection. A dialer finishes its stream and waits, up to
// finishGrace, for the listener to close the connection, which it does
// once its reader has read the stream's end, so nothing written is
// discarded. A listener that said goodbye waits the same way for the
// dialer; any other listener close is at once. A killed transport closes
// at once. The wait runs on its own goroutine, which the transport's
// Closed waits for.
func (c *streamConn) Close() error {
	c.once.Do(func() {
		idle := c.stopWrites()
		switch {
		case c.n.abrupt.Load():
			c.qc.CloseWithError(0, "")
		case !idle:
			// A writer is stuck (the peer stopped reading, or it is
			// mid-write as the lane aborts): what it holds fails.
			c.st.CancelWrite(0)
			c.qc.CloseWithError(0, "")
		case c.dialed:
			c.st.Close()
			c.n.linger(c.qc, nil)
		case c.finished.Load() && !c.sawEOF.Load():
			// After the goodbye: the dialer's end of the stream means it
			// read ours, and its reader is still running to see it.
			c.n.linger(c.qc, c.eof)
		default:
			c.st.CancelRead(0)
			c.qc.CloseWithError(0, "")
		}
	})
	return nil
}

func (c *streamConn) LocalAddr() net.Addr                { return c.qc.LocalAddr() }
func (c *streamConn) RemoteAddr() net.Addr               { return c.qc.RemoteAddr() }
func (c *streamConn) SetDeadline(t time.Time) error      { return c.st.SetDeadline(t) }
func (c *streamConn) SetReadDeadline(t time.Time) error  { return c.st.SetReadDeadline(t) }
func (c *streamConn) SetWriteDeadline(t time.Time) error { return c.st.SetWriteDeadline(t) }
