package soak

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy is a fault-injection TCP proxy: it forwards every connection it
// accepts to target, until told to fail it. The faults:
//
//   - Drop closes every connection (a FIN each way);
//   - Reset closes them with SO_LINGER 0, so each side reads an RST;
//   - Pause stops forwarding until Resume: bytes wait in the kernel
//     buffers and the connections stay up;
//   - Blackhole reads every byte and forwards none, on the connections it
//     holds and on new ones, until Unhole, which closes every connection
//     that lost bytes (their frame stream has a hole, so none may carry
//     on).
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	links  map[*link]struct{}
	resume chan struct{} // non-nil while paused; closed to resume
	hole   bool
	closed bool

	wg sync.WaitGroup

	// Forwarded and Discarded count bytes; Accepted connections; Parked
	// the reads held by a pause now.
	Forwarded, Discarded, Accepted, Parked atomic.Int64
}

// link is one accepted connection and its dial to the target.
type link struct {
	down, up net.Conn // up is nil for a connection accepted into a hole
	holed    atomic.Bool
	once     sync.Once
	done     chan struct{}
}

func (l *link) close(reset bool) {
	l.once.Do(func() {
		close(l.done)
		for _, c := range []net.Conn{l.down, l.up} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && reset {
				tc.SetLinger(0)
			}
			c.Close()
		}
	})
}

// NewProxy listens on a loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address peers dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.Accepted.Add(1)
		l := &link{down: c, done: make(chan struct{})}
		p.mu.Lock()
		hole, closed := p.hole, p.closed
		p.mu.Unlock()
		if !hole {
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			l.up = up
		}
		l.holed.Store(hole)
		p.mu.Lock()
		if closed || p.closed {
			p.mu.Unlock()
			l.close(false)
			continue
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.pump(l, l.down, l.up)
		if l.up != nil { // a link accepted into a hole has no upstream
			p.wg.Add(1)
			go p.pump(l, l.up, l.down)
		}
	}
}

// pump copies src to dst through the proxy's state of the moment.
func (p *Proxy) pump(l *link, src, dst net.Conn) {
	defer p.wg.Done()
	defer p.forget(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(l, dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward writes b to dst unless paused (then it waits) or holed (then
// it drops b); false means the link is done.
func (p *Proxy) forward(l *link, dst net.Conn, b []byte) bool {
	for {
		p.mu.Lock()
		resume, hole := p.resume, p.hole
		p.mu.Unlock()
		if resume != nil {
			p.Parked.Add(1)
			select {
			case <-resume:
				p.Parked.Add(-1)
				continue
			case <-l.done:
				p.Parked.Add(-1)
				return false
			}
		}
		if hole {
			l.holed.Store(true)
		}
		break
	}
	if l.holed.Load() || dst == nil {
		p.Discarded.Add(int64(len(b)))
		return true
	}
	if _, err := dst.Write(b); err != nil {
		return false
	}
	p.Forwarded.Add(int64(len(b)))
	return true
}

func (p *Proxy) forget(l *link) {
	l.close(false)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// each runs fn on every link held now.
func (p *Proxy) each(fn func(*link)) int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		fn(l)
	}
	return len(ls)
}

// Drop closes every connection; it returns how many.
func (p *Proxy) Drop() int { return p.each(func(l *link) { l.close(false) }) }

// Reset closes every connection with an RST; it returns how many.
func (p *Proxy) Reset() int { return p.each(func(l *link) { l.close(true) }) }

// Pause stops forwarding until Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume == nil {
		p.resume = make(chan struct{})
	}
}

// Resume forwards again what Pause held.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
}

// Blackhole discards every byte from now until Unhole.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
}

// Unhole ends the blackhole and closes every connection that lost bytes
// to it; it returns how many.
func (p *Proxy) Unhole() int {
	p.mu.Lock()
	p.hole = false
	p.mu.Unlock()
	n := 0
	p.each(func(l *link) {
		if l.holed.Load() {
			l.close(false)
			n++
		}
	})
	return n
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Resume()
	p.Drop()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
