// Package testnet is an in-memory network for tests: listeners and dials
// over net.Pipe, so that two nodes (their messenger transports and their
// per-stream connections) can talk inside a testing/synctest bubble. A
// goroutine blocked on a real socket is not durably blocked, and the
// bubble's clock cannot move while one is; a goroutine blocked on a
// net.Pipe is, so a test of heartbeats or timeouts runs on the fake clock
// and never waits for real time.
//
// A pipe has no buffer: a write returns only once the peer has read it.
// Every connection of the messenger transport and of the per-stream path
// has a reader draining it, so this only changes timing.
package testnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamsock"
)

// ErrRefused is returned by a dial to an address no listener holds.
var ErrRefused = errors.New("testnet: connection refused")

// Net is one in-memory network: a set of listeners by address, on the
// Hosts of the network. Addresses
// look like TCP loopback addresses (127.0.0.1:port), unique on the Net, so
// code that parses them as host:port takes them.
type Net struct {
	mu   sync.Mutex
	next uint16
	lns  map[string]*listener
	held map[string]chan struct{} // listener address → closed on Release
}

// New returns an empty network.
func New() *Net {
	return &Net{next: 10000, lns: map[string]*listener{}, held: map[string]chan struct{}{}}
}

// Host is one machine of n: what it listens on and dials is its own, and
// Kill drops all of it at once, as the kernel does for a killed process.
type Host struct {
	n     *Net
	mu    sync.Mutex
	dead  bool
	lns   []*listener
	conns map[*conn]struct{}
}

// Host adds a machine to n.
func (n *Net) Host() *Host { return &Host{n: n, conns: map[*conn]struct{}{}} }

// fresh is a new address of n; the caller holds n.mu.
func (n *Net) fresh() *net.TCPAddr {
	n.next++
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), n.next))
}

// Listen opens a listener on a fresh address of n; the address asked for
// is ignored, as port 0 would be.
func (h *Host) Listen(string) (net.Listener, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dead {
		return nil, net.ErrClosed
	}
	h.n.mu.Lock()
	addr := h.n.fresh()
	l := &listener{h: h, addr: addr, conns: make(chan *conn), done: make(chan struct{})}
	h.n.lns[addr.String()] = l
	h.n.mu.Unlock()
	h.lns = append(h.lns, l)
	return l, nil
}

// Dial connects to the listener at addr ("host:port" as its Addr prints
// it). It waits until the listener accepts, ctx ends, or it closes.
func (h *Host) Dial(ctx context.Context, addr string) (net.Conn, error) {
	h.n.mu.Lock()
	l := h.n.lns[addr]
	local := h.n.fresh()
	h.n.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("dial %s: %w", addr, ErrRefused)
	}
	a, b := net.Pipe()
	mine := &conn{Conn: a, h: h, to: addr, local: local, remote: l.addr, closed: make(chan struct{})}
	theirs := &conn{Conn: b, h: l.h, local: l.addr, remote: local, closed: make(chan struct{})}
	if !h.track(mine) {
		a.Close()
		b.Close()
		return nil, net.ErrClosed
	}
	select {
	case l.conns <- theirs:
		return mine, nil
	case <-l.done:
	case <-ctx.Done():
	}
	mine.Close()
	b.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("dial %s: %w", addr, ErrRefused)
}

// track records c as h's, unless h is dead.
func (h *Host) track(c *conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dead {
		return false
	}
	h.conns[c] = struct{}{}
	return true
}

func (h *Host) untrack(c *conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

// Kill closes every listener and every connection end of h, and refuses
// what h would open next: its peers read EOF at once.
func (h *Host) Kill() {
	h.mu.Lock()
	h.dead = true
	lns, conns := h.lns, h.conns
	h.lns, h.conns = nil, map[*conn]struct{}{}
	h.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	for c := range conns {
		c.Close()
	}
}

// Network is h as a streamsock.Network: endpoints are the listener's
// address as text.
func (h *Host) Network() streamsock.Network { return network{h} }

// Transport is a messenger transport on h, with key "mem".
func (h *Host) Transport() (*streamsock.Transport, error) {
	return streamsock.New(network{h}, streamsock.Config{Key: "mem", Priority: 100, Logger: slog.New(slog.DiscardHandler)})
}

var _ ext.Transport = (*streamsock.Transport)(nil)

type network struct{ h *Host }

func (w network) Listen(context.Context) (net.Listener, []byte, error) {
	ln, err := w.h.Listen("")
	if err != nil {
		return nil, nil, err
	}
	return ln, []byte(ln.Addr().String()), nil
}

func (w network) Dial(ctx context.Context, endpoint []byte) (net.Conn, error) {
	return w.h.Dial(ctx, string(endpoint))
}

type listener struct {
	h     *Host
	addr  net.Addr
	conns chan *conn
	once  sync.Once
	done  chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		if !l.h.track(c) {
			c.Close()
			return nil, net.ErrClosed
		}
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.once.Do(func() {
		n := l.h.n
		n.mu.Lock()
		delete(n.lns, l.addr.String())
		n.mu.Unlock()
		close(l.done)
	})
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }

// Hold makes writes on the connections dialed to the listener at addr
// wait until Release: the peer hears nothing more from the dialers, while
// their connections stay open (a stalled or partitioned producer). The
// other direction still flows. A held write does not heed its write
// deadline; closing its connection ends it.
func (n *Net) Hold(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.held[addr] == nil {
		n.held[addr] = make(chan struct{})
	}
}

// Release lets every held write go on.
func (n *Net) Release() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for addr, ch := range n.held {
		close(ch)
		delete(n.held, addr)
	}
}

// conn is one end of a pipe with TCP-like addresses. The dialer's end
// (to set) waits while its listener's address is held.
type conn struct {
	net.Conn
	h             *Host
	to            string
	local, remote net.Addr
	once          sync.Once
	closed        chan struct{}
}

func (c *conn) Write(p []byte) (int, error) {
	if c.to != "" {
		n := c.h.n
		n.mu.Lock()
		ch := n.held[c.to]
		n.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-c.closed:
				return 0, net.ErrClosed
			}
		}
	}
	return c.Conn.Write(p)
}

func (c *conn) Close() error {
	c.once.Do(func() { close(c.closed) })
	c.h.untrack(c)
	return c.Conn.Close()
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }
