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

// Net is one in-memory network: a set of listeners by address. Addresses
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

// Listen opens a listener on a fresh address of n; the address asked for
// is ignored, as port 0 would be.
func (n *Net) Listen(string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	addr := net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), n.next))
	l := &listener{n: n, addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	n.lns[addr.String()] = l
	return l, nil
}

// Dial connects to the listener at addr ("host:port" as its Addr prints
// it). It waits until the listener accepts, ctx ends, or it closes.
func (n *Net) Dial(ctx context.Context, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.lns[addr]
	n.next++
	local := net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), n.next))
	n.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("dial %s: %w", addr, ErrRefused)
	}
	a, b := net.Pipe()
	mine := &conn{Conn: a, n: n, to: addr, local: local, remote: l.addr, closed: make(chan struct{})}
	theirs := &conn{Conn: b, local: l.addr, remote: local, closed: make(chan struct{})}
	select {
	case l.conns <- theirs:
		return mine, nil
	case <-l.done:
		a.Close()
		b.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, ErrRefused)
	case <-ctx.Done():
		a.Close()
		b.Close()
		return nil, ctx.Err()
	}
}

// Network is n as a streamsock.Network: endpoints are the listener's
// address as text.
func (n *Net) Network() streamsock.Network { return network{n} }

// Transport is a messenger transport over n, with key "mem".
func (n *Net) Transport() (*streamsock.Transport, error) {
	return streamsock.New(network{n}, streamsock.Config{Key: "mem", Priority: 100, Logger: slog.New(slog.DiscardHandler)})
}

var _ ext.Transport = (*streamsock.Transport)(nil)

type network struct{ n *Net }

func (w network) Listen(context.Context) (net.Listener, []byte, error) {
	ln, err := w.n.Listen("")
	if err != nil {
		return nil, nil, err
	}
	return ln, []byte(ln.Addr().String()), nil
}

func (w network) Dial(ctx context.Context, endpoint []byte) (net.Conn, error) {
	return w.n.Dial(ctx, string(endpoint))
}

type listener struct {
	n     *Net
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.once.Do(func() {
		l.n.mu.Lock()
		delete(l.n.lns, l.addr.String())
		l.n.mu.Unlock()
		close(l.done)
	})
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }

// Hold makes writes on the connections dialed to the listener at addr
// wait until Release: the peer hears nothing more from the dialers, while
// their connections stay open (a stalled or partitioned producer). The
// other direction still flows.
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
// (n set) waits while its listener's address is held.
type conn struct {
	net.Conn
	n             *Net
	to            string
	local, remote net.Addr
	once          sync.Once
	closed        chan struct{}
}

func (c *conn) Write(p []byte) (int, error) {
	if c.n != nil {
		c.n.mu.Lock()
		ch := c.n.held[c.to]
		c.n.mu.Unlock()
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
	return c.Conn.Close()
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }
