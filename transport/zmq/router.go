package zmq

import (
	"bufio"
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
	conns  map[net.Conn]struct{} // every accepted connection, handshaking or not
	closed bool
	wg     sync.WaitGroup
}

// listen binds endpoint (tcp:// or ipc://).
func listen(endpoint string, maxFrame int, onMsg func(*zmq4.Conn, [][]byte)) (*router, error) {
	r := &router{maxFrame: maxFrame, onMsg: onMsg, conns: map[net.Conn]struct{}{}}
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
	if !r.track(raw) {
		return
	}
	defer r.untrack(raw)
	guard := newGuard(raw, uint64(r.maxFrame)+64, false) // room for the type part
	raw.SetDeadline(time.Now().Add(handshakeTimeout))
	c, err := zmq4.Open(guard, null.Security(), zmq4.Router, zmq4.SocketIdentity("velo"), true, nil)
	if err != nil {
		return
	}
	raw.SetDeadline(time.Time{})
	for {
		m, err := c.RecvMsg()
		if err != nil {
			return
		}
		if m.Type == zmq4.CmdMsg {
			continue // PING (answered by zmq4) and other commands
		}
		// A ROUTER socket would put the sender's identity (READY's
		// Identity property) in front of the parts; replies here go back
		// on c itself, so it is not needed.
		r.onMsg(c, m.Frames)
	}
}

func (r *router) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *router) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// readerWait bounds how long close waits for the connection goroutines.
// One can be blocked handing a message to a node that stopped taking them
// (its inbound queue full): the node releases it when it closes its
// adapter, after the transport's Shutdown, so waiting for it here would
// never end. TCP's transport bounds the same wait.
const readerWait = time.Second

// close stops accepting, closes every connection, those still in their
// handshake too, and waits up to readerWait for their goroutines.
func (r *router) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(readerWait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
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
//
// It also saves system calls: zmq4 reads each frame's header and body
// with reads of their own (buffered here), and writes each part's header
// and body with writes of their own, since a wrapped connection loses
// net.Buffers' writev; the guard follows the outgoing framing too and
// writes a whole message at once.
type zmtpGuard struct {
	net.Conn
	max uint64
	br  *bufio.Reader

	checked bool // the first byte was checked (a dialler's guard starts so: it speaks first)

	in framing

	wmu  sync.Mutex // zmq4 may answer a PING from its reader while a send runs
	out  framing
	more bool // the last outgoing frame header had MORE set
	wbuf []byte
}

// framing follows ZMTP frames in one direction.
type framing struct {
	n     uint64 // bytes of the greeting passed, up to 64
	state int    // what the next byte is: flags, size, body
	long  bool
	flags byte
	size  [8]byte
	got   int    // bytes of the size passed
	left  uint64 // body bytes left in this frame
}

const greetingLen = 64

// coalesceMax bounds what the guard holds back to write a message whole;
// a larger message goes out in a few writes.
const coalesceMax = 64 << 10

// What the framing expects next after the greeting.
const (
	wantFlags = iota
	wantSize
	inBody
)

var errFraming = errors.New("zmq: connection breaks ZMTP framing or declares a frame above the cap")

func newGuard(c net.Conn, max uint64, dialler bool) *zmtpGuard {
	return &zmtpGuard{Conn: c, max: max, br: bufio.NewReaderSize(c, 32<<10), checked: dialler}
}

func (g *zmtpGuard) Write(p []byte) (int, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if !g.checked {
		g.checked = true
		first, err := g.br.Peek(1)
		if err != nil {
			return 0, err
		}
		if first[0] != 0xFF {
			return 0, errFraming
		}
	}
	if g.out.n < greetingLen {
		g.out.scan(p, ^uint64(0), nil) // the greeting: one write of its own
		return g.Conn.Write(p)
	}
	g.out.scan(p, ^uint64(0), func(flags byte) { g.more = flags&0x01 != 0 })
	whole := g.out.state == wantFlags && !g.more
	if !whole && len(g.wbuf)+len(p) <= coalesceMax {
		g.wbuf = append(g.wbuf, p...)
		return len(p), nil
	}
	if len(g.wbuf) == 0 {
		return g.Conn.Write(p)
	}
	bufs := net.Buffers{g.wbuf, p}
	_, err := bufs.WriteTo(g.Conn)
	g.wbuf = g.wbuf[:0]
	if cap(g.wbuf) > coalesceMax {
		g.wbuf = nil
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (g *zmtpGuard) Read(p []byte) (int, error) {
	n, err := g.br.Read(p)
	if e := g.in.scanIn(p[:n], g.max); e != nil {
		return 0, e
	}
	return n, err
}

// scanIn follows inbound bytes: the greeting must start with 0xFF, and no
// frame may declare more than max.
func (f *framing) scanIn(b []byte, max uint64) error {
	if len(b) > 0 && f.n == 0 && b[0] != 0xFF {
		return errFraming
	}
	return f.scan(b, max, nil)
}

// scan follows b through the greeting and then frame by frame, calling
// onFlags with each frame's flags; it fails for a frame above max.
func (g *framing) scan(b []byte, max uint64, onFlags func(byte)) error {
	for len(b) > 0 {
		if g.n < greetingLen {
			k := min(uint64(len(b)), greetingLen-g.n)
			g.n += k
			b = b[k:]
			continue
		}
		switch g.state {
		case wantFlags:
			g.flags, g.long, g.got = b[0], b[0]&0x02 != 0, 0
			if onFlags != nil {
				onFlags(b[0])
			}
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
			g.left = binary.BigEndian.Uint64(g.size[:])
			clear(g.size[:])
			if g.left > max {
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
