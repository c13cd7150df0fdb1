package streamsock

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/velo-go/velo/internal/frame"
)

// errStalled ends a connection whose frame stayed half-received too long.
var errStalled = errors.New("a frame stayed half-received past the frame timeout")

// stallGuard is what a connection's frame reader reads through. It bounds
// how long one frame may stay half-received, so a peer cannot hold a
// connection, its goroutine and its buffer with a frame it never finishes
// (a preamble, or one byte a minute). A connection idle between frames has
// no bound.
//
// The bound is a read deadline. Moving it for every frame would cost a timer
// update per read on a busy connection, so the deadline is set only when a
// frame starts that it no longer covers, half the timeout beyond what that
// frame needs: a stalled frame is cut between one and one and a half
// timeouts after it started. A deadline that passes between frames costs one
// wasted wake-up, and is then cleared.
type stallGuard struct {
	conn    net.Conn
	src     io.Reader // conn, or a raw reader of its socket (rawread_linux.go)
	r       *frame.Reader
	timeout time.Duration
	frame   int64     // stream offset of the frame in progress that began is for
	began   time.Time // when that frame was first seen half-received; zero between frames
	armed   time.Time // the read deadline set on conn; zero when none
	hook    func(n int)
	acks    ackDelayer // accepted TCP connections only (delayack.go)
}

// newStallGuard wraps conn and makes the frame reader that reads through it.
func newStallGuard(conn net.Conn, maxFrame int, timeout time.Duration, hook func(int)) (*stallGuard, *frame.Reader) {
	g := &stallGuard{conn: conn, src: newConnReader(conn), timeout: timeout, hook: hook}
	g.r = frame.NewReader(g, maxFrame)
	return g, g.r
}

func (g *stallGuard) Read(p []byte) (int, error) {
	if !g.r.Buffered() {
		g.began = time.Time{}
	} else if off := g.r.Offset(); g.began.IsZero() || off != g.frame {
		g.frame, g.began = off, time.Now()
		if due := g.began.Add(g.timeout); g.armed.Before(due) {
			g.arm(due.Add(g.timeout / 2))
		}
	}
	for {
		n, err := g.src.Read(p)
		if n > 0 {
			g.acks.read()
			if g.hook != nil {
				g.hook(n)
			}
		}
		if n > 0 || err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		if g.began.IsZero() {
			g.arm(time.Time{}) // between frames: no bound
			continue
		}
		if waited := time.Since(g.began); waited >= g.timeout {
			return 0, fmt.Errorf("%w (%v)", errStalled, waited.Round(time.Millisecond))
		}
		g.arm(g.began.Add(g.timeout))
	}
}

func (g *stallGuard) arm(t time.Time) {
	g.armed = t
	g.conn.SetReadDeadline(t)
}
