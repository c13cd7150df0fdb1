package tcpframe

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// preambleTimeout bounds how long a connection may take to send its
// preamble (the reference's TOKEN_READ_TIMEOUT).
const preambleTimeout = 20 * time.Second

var timeZero time.Time

// listener hands out each accepted connection as an inbound stream and
// keeps those not ended, for Close.
type listener struct {
	ln    net.Listener
	entry []byte

	mu     sync.Mutex
	closed bool
	conns  map[*inbound]struct{}
}

func (l *listener) Entry() []byte  { return l.entry }
func (l *listener) Addr() net.Addr { return l.ln.Addr() }

// Accept returns the next connection; it reads nothing from it (Route
// does, on the stream's own goroutine).
func (l *listener) Accept() (ext.FrameInbound, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	in := &inbound{l: l, c: c}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[in] = struct{}{}
	l.mu.Unlock()
	return in, nil
}

func (l *listener) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for in := range conns {
		in.c.Close()
	}
	return l.ln.Close()
}

func (l *listener) forget(in *inbound) {
	l.mu.Lock()
	delete(l.conns, in)
	l.mu.Unlock()
}

// inbound is one accepted connection.
type inbound struct {
	l    *listener
	c    net.Conn
	fr   *frame.Reader
	once sync.Once
}

// Route reads the 16-byte preamble, within preambleTimeout.
func (in *inbound) Route() (ext.StreamRoute, error) {
	var pre [wire.TCPPreambleLen]byte
	in.c.SetReadDeadline(time.Now().Add(preambleTimeout))
	if _, err := io.ReadFull(in.c, pre[:]); err != nil {
		return ext.StreamRoute{}, fmt.Errorf("velo: stream preamble: %w", err)
	}
	in.c.SetReadDeadline(timeZero)
	p, _ := wire.DecodeTCPPreamble(pre[:]) // 16 bytes always decode
	in.fr = frame.NewReader(in.c, wire.MaxTCPFrame)
	return ext.StreamRoute{AnchorID: p.AnchorID, SessionID: p.SessionID}, nil
}

// Recv reads the next frame. Its payload aliases the reader's chunk,
// which is never written again below what was handed out: the node may
// keep it.
func (in *inbound) Recv() ([]byte, error) {
	if in.fr == nil {
		return nil, fmt.Errorf("%w: Recv before Route", ext.ErrMalformedStream)
	}
	f, err := in.fr.Next()
	if err != nil {
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			in.release() // the stream is over: its chunk goes back
		}
		var tl *ext.FrameTooLargeError
		if errors.Is(err, frame.ErrMalformed) || errors.As(err, &tl) {
			return nil, fmt.Errorf("%w: %w", ext.ErrMalformedStream, err)
		}
		return nil, err
	}
	if f.Type != ext.Message || len(f.Header) != 0 {
		in.release()
		return nil, fmt.Errorf("%w: per-stream frame of type %d with a %d-byte header", ext.ErrMalformedStream, f.Type, len(f.Header))
	}
	return f.Payload, nil
}

func (in *inbound) SetReadDeadline(t time.Time) error { return in.c.SetReadDeadline(t) }

// release gives the reader's chunk back. Only the reading goroutine calls
// it (Recv, Confirm, Refuse): Close may come from another one while a
// Recv is in progress.
func (in *inbound) release() {
	if in.fr != nil {
		in.fr.Close()
		in.fr = nil
	}
}

// Confirm closes the connection: the producer closed its end after the
// terminal, and a successful write is all TCP confirms.
func (in *inbound) Confirm() error {
	in.release()
	return in.Close()
}

// Refuse closes the connection, which is how a TCP dialer hears of it.
func (in *inbound) Refuse() error {
	in.release()
	return in.Close()
}

// Close closes the connection: the producer's watcher sees it end, and a
// Recv in progress returns.
func (in *inbound) Close() error {
	in.once.Do(func() {
		in.c.Close()
		in.l.forget(in)
	})
	return nil
}
