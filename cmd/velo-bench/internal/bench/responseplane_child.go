package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
)

// The children of a --procs run (the protocol is in
// responseplane_proto.go): this file is their end of the protocol; what
// each role does is in responseplane_roles.go.

// rpWallClock is the clock of a --procs run: every process on the host
// reads the same one.
func rpWallClock() int64 { return time.Now().UnixNano() }

// rpSnap is a child's counters at one end of the window.
type rpSnap struct {
	cpu    time.Duration
	writes uint64
	wakes  rpWakes
	sys    rpSyscalls
}

func takeSnap(wc rpWakeCounter) rpSnap {
	s := rpSnap{cpu: processCPU(), writes: writeSyscalls(), sys: takeSyscalls()}
	if wc != nil {
		s.wakes = wc.wakes()
	}
	return s
}

// fill puts the counters of the window from s0 to s into rep.
func (s rpSnap) fill(rep *rpChildReport, s0 rpSnap) {
	rep.CPUNS, rep.Writes, rep.Wakes = int64(s.cpu-s0.cpu), s.writes-s0.writes, s.wakes.sub(s0.wakes)
	rep.Sys = s.sys.sub(s0.sys)
}

// rpChild is one child's end of the protocol.
type rpChild struct {
	role  string
	index int
	arm   string
	cfg   ResponsePlaneConfig

	outMu sync.Mutex
	out   io.Writer
	in    chan rpMsg
}

// ResponsePlaneChild serves as one child of a --procs run: role is
// "frontend" or "engine", index its number on its side, arm the arm. It
// speaks the protocol over in and out and returns once the parent says
// exit (or goes away), or with what went wrong (which it also tells the
// parent).
func ResponsePlaneChild(role string, index int, arm string, in io.Reader, out io.Writer) (err error) {
	c := &rpChild{role: role, index: index, arm: arm, out: out, in: make(chan rpMsg, 8)}
	ctx, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	go c.read(in, fail)
	defer func() {
		switch {
		case errors.Is(err, errParentGone):
			// The parent failed the run and is killing its children:
			// there is no one to tell.
			err = nil
		case err != nil:
			err = fmt.Errorf("%s %d: %w", role, index, err)
			c.send(rpMsg{Op: "error", Err: err.Error()})
		}
	}()
	m, err := c.recv(ctx, "config")
	if err != nil {
		return err
	}
	if m.Config == nil {
		return errors.New("config without a config")
	}
	c.cfg = *m.Config
	if err := c.cfg.Validate(); err != nil {
		return err
	}
	if c.cfg.ChildCPUProfile != "" {
		stop, err := startChildProfile(fmt.Sprintf("%s.%s.%s%d.%d", c.cfg.ChildCPUProfile, arm, role, index, os.Getpid()))
		if err != nil {
			return err
		}
		defer stop()
	}
	switch role {
	case "frontend":
		if index < 0 || index >= c.cfg.frontendProcs() {
			return fmt.Errorf("frontend index %d out of range", index)
		}
		return c.frontend(ctx, fail)
	case "engine":
		if index < 0 || index >= c.cfg.engineProcs() {
			return fmt.Errorf("engine index %d out of range", index)
		}
		return c.engine(ctx, fail)
	}
	return fmt.Errorf("unknown role %q", role)
}

// read hands the parent's lines to c.in; when the parent closes stdin (or
// dies) before it said exit, the child fails.
func (c *rpChild) read(in io.Reader, fail context.CancelCauseFunc) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var m rpMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			fail(fmt.Errorf("a bad line from the parent: %w", err))
			return
		}
		c.in <- m
		if m.Op == "exit" {
			return // the parent closes stdin next: no failure
		}
	}
	fail(errParentGone)
}

// errParentGone is the cause of a child's end when its stdin closed
// before the parent said exit.
var errParentGone = errors.New("the parent closed stdin")

func (c *rpChild) recv(ctx context.Context, op string) (rpMsg, error) {
	select {
	case m := <-c.in:
		if m.Op != op {
			return m, fmt.Errorf("got %q from the parent, want %q", m.Op, op)
		}
		return m, nil
	case <-ctx.Done():
		return rpMsg{}, context.Cause(ctx)
	}
}

func (c *rpChild) send(m rpMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.outMu.Lock()
	defer c.outMu.Unlock()
	_, err = c.out.Write(append(b, '\n'))
	return err
}

// rpControlQueue is an engine's queue as its control connections fill
// it. In a batch the want-th request closes it; in a closed loop (want 0)
// the end of the run does.
type rpControlQueue struct {
	mu     sync.Mutex
	ch     chan rpQueued
	want   int
	queued int
	closed bool
}

// put queues q; a request past want, or after the end, is an error. The
// channel holds every request that can be waiting at once (all of the
// engine's in a batch, Concurrency in a closed loop), so the send under
// the lock never blocks.
func (c *rpControlQueue) put(q rpQueued) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("a request after the last one (%d queued)", c.queued)
	}
	c.ch <- q
	c.queued++
	if c.queued == c.want {
		c.closed = true
		close(c.ch)
	}
	return nil
}

// end closes the queue if it is still open: the engine finishes what it
// holds and returns.
func (c *rpControlQueue) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.ch)
	}
}

func (c *rpControlQueue) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queued
}

// control reads the requests one frontend dispatches on conn to global
// engine g and queues them.
func (c *rpChild) control(conn net.Conn, q *rpControlQueue, g int) error {
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 4<<10), 1<<20)
	for sc.Scan() {
		var d rpDispatch
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return fmt.Errorf("control: %w", err)
		}
		// A batch's requests are known ahead; a closed loop's only by
		// their index being positive.
		batch := c.cfg.Concurrency == 0
		if d.I < 0 || batch && (d.I >= c.cfg.Requests || d.I%c.cfg.Engines != g) {
			return fmt.Errorf("control: request %d is not engine %d's", d.I, g)
		}
		req, err := d.engineReq(c.cfg, c.arm)
		if err != nil {
			return fmt.Errorf("control: %w", err)
		}
		if err := q.put(rpQueued{idx: d.I, req: req}); err != nil {
			return fmt.Errorf("control: %w", err)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("control: %w", err)
	}
	return nil
}

// registerPeer registers the peer a hello named with n.
func registerPeer(n *velo.Node, p *ext.PeerInfo) error {
	if p == nil {
		return errors.New("no PeerInfo in its hello")
	}
	return n.RegisterPeer(*p)
}

// startChildProfile starts a CPU profile of this child into path; stop
// ends it and closes the file.
func startChildProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
