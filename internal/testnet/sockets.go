package testnet

import (
	"context"
	"net"
	"sync"
)

// Sockets makes real TCP listeners and connections and keeps them, so that
// a test can kill them all at once as the kernel does for a process that
// died: Kill resets every connection (SO_LINGER 0: an RST, no FIN) and
// closes every listener, with nothing of an orderly end said. Transports
// under test listen and dial through it (their test hooks take Listen and
// Dial); what sits above the sockets (TLS, HTTP/2) sees them vanish.
type Sockets struct {
	mu    sync.Mutex
	dead  bool
	lns   []net.Listener
	conns []net.Conn
}

// Listen listens on addr ("tcp").
func (s *Sockets) Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		ln.Close()
		return nil, net.ErrClosed
	}
	s.lns = append(s.lns, ln)
	return &trackedListener{Listener: ln, s: s}, nil
}

// Dial dials addr ("tcp") within ctx.
func (s *Sockets) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !s.keep(c) {
		return nil, net.ErrClosed
	}
	return c, nil
}

// keep adds c to what Kill resets; after Kill it resets c and is false.
func (s *Sockets) keep(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		reset(c)
		return false
	}
	s.conns = append(s.conns, c)
	return true
}

// Kill resets every connection and closes every listener made so far, and
// refuses any made after.
func (s *Sockets) Kill() {
	s.mu.Lock()
	s.dead = true
	lns, conns := s.lns, s.conns
	s.lns, s.conns = nil, nil
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		reset(c)
	}
}

// reset closes c with an RST where it is TCP.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

type trackedListener struct {
	net.Listener
	s *Sockets
}

func (l *trackedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.s.keep(c) {
			return c, nil
		}
		// Killed while it was accepted: reset, and the next Accept
		// fails on the closed listener.
	}
}
