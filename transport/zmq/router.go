package zmq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// handshakeTimeout bounds the ZMTP greeting and READY of an inbound
// connection.
const handshakeTimeout = 3 * time.Second

// router is the ROUTER end: it accepts DEALER connections and speaks ZMTP
// on each with zmq4's connection type, one goroutine per connection, so
// that a connection whose handshake stalls holds up only itself. (zmq4's
// own ROUTER socket opens connections one at a time in its accept loop:
// one peer that sends half a greeting stops every later peer from
// connecting.) A reply goes back on the connection its request came on,
// which is where a ROUTER routes the sender's identity.
type router struct {
	ln       net.Listener
	ipcPath  string
	maxFrame int
	onMsg    func(c *zmq4.Conn, parts [][]byte)

	mu     sync.Mutex
	conns  map[*zmq4.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// listen binds endpoint (tcp:// or ipc://).
func listen(endpoint string, maxFrame int, onMsg func(*zmq4.Conn, [][]byte)) (*router, error) {
	r := &router{maxFrame: maxFrame, onMsg: onMsg, conns: map[*zmq4.Conn]struct{}{}}
	var err error
	if addr, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		r.ln, err = net.Listen("tcp", addr)
	} else {
		r.ipcPath = strings.TrimPrefix(endpoint, "ipc://")
		r.ln, err = net.Listen("unix", r.ipcPath)
	}
	if err != nil {
		return nil, err
	}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

func (r *router) addr() net.Addr { return r.ln.Addr() }

func (r *router) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		r.wg.Add(1)
		go r.serve(c)
	}
}

// serve runs one inbound connection: the handshake within its bound, then
// messages until the connection ends. A connection that breaks ZMTP (or
// declares a frame above the cap) is closed; the others go on.
func (r *router) serve(raw net.Conn) {
	defer r.wg.Done()
	defer raw.Close()
	guard := &zmtpGuard{Conn: raw, max: uint64(r.maxFrame) + 64} // room for the type part
	raw.SetDeadline(time.Now().Add(handshakeTimeout))
	c, err := zmq4.Open(guard, null.Security(), zmq4.Router, zmq4.SocketIdentity("velo"), true, nil)
	if err != nil {
		return
	}
	raw.SetDeadline(time.Time{})
	if !r.track(c) {
		return
	}
	defer r.untrack(c)
	for {
		m, err := c.RecvMsg()
		if err != nil {
			return
		}
		if m.Type == zmq4.CmdMsg {
			continue // PING (answered by zmq4) and other commands
		}
		// A ROUTER puts the sender's identity in front of its parts.
		id := []byte(c.Peer.Meta["Identity"])
		r.onMsg(c, append([][]byte{id}, m.Frames...))
	}
}

func (r *router) track(c *zmq4.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *router) untrack(c *zmq4.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// close stops accepting, closes every connection and waits for their
// goroutines.
func (r *router) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	r.wg.Wait()
	if r.ipcPath != "" {
		os.Remove(r.ipcPath)
	}
}

// zmtpGuard follows the ZMTP framing of what it reads, so that a peer is
// refused before zmq4 allocates what it declares: zmq4 makes a buffer of
// each frame's declared size (up to 2^63) before reading it. It also
// holds back our greeting until the peer's first byte has come and is the
// greeting's 0xFF, so a connection that is not ZMTP is closed at once,
// before we say anything. Every ZMTP peer sends its signature without
// waiting for ours, so waiting for it first cannot deadlock.
type zmtpGuard struct {
	net.Conn
	max uint64

	checked bool   // the first byte was checked (a dialler's guard starts so: it speaks first)
	pre     []byte // read (and scanned) before our greeting was written

	n     uint64 // bytes of the greeting read, up to 64
	state int    // what the next byte is: flags, size, body
	long  bool
	size  [8]byte
	got   int    // bytes of the size read
	left  uint64 // body bytes left in this frame
}

const greetingLen = 64

// What the guard expects next after the greeting.
const (
	wantFlags = iota
	wantSize
	inBody
)

var errFraming = errors.New("zmq: connection breaks ZMTP framing or declares a frame above the cap")

func (g *zmtpGuard) Write(p []byte) (int, error) {
	if !g.checked {
		g.checked = true
		var one [1]byte
		n, err := g.Conn.Read(one[:])
		if n == 0 {
			if err == nil {
				err = errFraming
			}
			return 0, err
		}
		if err := g.scan(one[:]); err != nil {
			return 0, err
		}
		g.pre = append(g.pre, one[0])
	}
	return g.Conn.Write(p)
}

func (g *zmtpGuard) Read(p []byte) (int, error) {
	if len(g.pre) > 0 {
		n := copy(p, g.pre)
		g.pre = g.pre[n:]
		return n, nil
	}
	n, err := g.Conn.Read(p)
	if e := g.scan(p[:n]); e != nil {
		return 0, e
	}
	return n, err
}

func (g *zmtpGuard) scan(b []byte) error {
	for len(b) > 0 {
		if g.n < greetingLen {
			if g.n == 0 && b[0] != 0xFF {
				return errFraming
			}
			k := min(uint64(len(b)), greetingLen-g.n)
			g.n += k
			b = b[k:]
			continue
		}
		switch g.state {
		case wantFlags:
			g.long, g.got = b[0]&0x02 != 0, 0
			g.state = wantSize
			b = b[1:]
		case wantSize:
			need := 1
			if g.long {
				need = 8
			}
			k := min(len(b), need-g.got)
			copy(g.size[8-need+g.got:], b[:k])
			g.got += k
			b = b[k:]
			if g.got < need {
				continue
			}
			if g.long {
				g.left = binary.BigEndian.Uint64(g.size[:])
			} else {
				g.left = uint64(g.size[7])
			}
			clear(g.size[:])
			if g.left > g.max {
				return fmt.Errorf("%w: %d bytes", errFraming, g.left)
			}
			g.state = inBody
			if g.left == 0 {
				g.state = wantFlags
			}
		case inBody:
			k := min(uint64(len(b)), g.left)
			g.left -= k
			b = b[k:]
			if g.left == 0 {
				g.state = wantFlags
			}
		}
	}
	return nil
}
