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
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
)

// The children of a --procs run (the protocol is in
// responseplane_proto.go): a frontend owns its requests' streams and
// dispatches each to its engine; an engine serves the requests that
// arrive on its control listener with the same batching loop as
// in-process.

// rpWallClock is the clock of a --procs run: every process on the host
// reads the same one.
func rpWallClock() int64 { return time.Now().UnixNano() }

// rpSnap is a child's counters at one end of the window.
type rpSnap struct {
	cpu    time.Duration
	writes uint64
	wakes  rpWakes
}

func takeSnap(wc rpWakeCounter) rpSnap {
	s := rpSnap{cpu: processCPU(), writes: writeSyscalls()}
	if wc != nil {
		s.wakes = wc.wakes()
	}
	return s
}

// fill puts the counters of the window from s0 to s into rep.
func (s rpSnap) fill(rep *rpChildReport, s0 rpSnap) {
	rep.CPUNS, rep.Writes, rep.Wakes = int64(s.cpu-s0.cpu), s.writes-s0.writes, s.wakes.sub(s0.wakes)
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
	switch role {
	case "frontend":
		if index < 0 || index >= c.cfg.AnchorHosts {
			return fmt.Errorf("frontend index %d out of range", index)
		}
		return c.frontend(ctx, fail)
	case "engine":
		if index < 0 || index >= c.cfg.Engines {
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

// frontend is the frontend child: it owns requests i with i%AnchorHosts
// == index, opens each and dispatches it to engine i%Engines.
func (c *rpChild) frontend(ctx context.Context, fail context.CancelCauseFunc) error {
	cfg := c.cfg
	hello := rpHello{PID: os.Getpid()}
	var fronts rpFrontends
	var wc rpWakeCounter
	var node *velo.Node // the velo arms
	va, isVelo := veloArmOf(cfg, c.arm)
	switch {
	case isVelo:
		f, err := newVeloFronts(ctx, cfg, 1, va)
		if err != nil {
			return err
		}
		defer f.close()
		fronts, wc, node = f, f, f.hosts[0]
		pi := node.PeerInfo()
		hello.Peer = &pi
	case c.arm == "raw":
		f, err := newRawFronts(ctx, cfg, 1)
		if err != nil {
			return err
		}
		defer f.close()
		fronts, hello.Addr = f, f.addrs()[0]
	}
	if err := c.send(rpMsg{Op: "hello", Hello: &hello}); err != nil {
		return err
	}
	m, err := c.recv(ctx, "peers")
	if err != nil {
		return err
	}
	if len(m.Peers) != cfg.Engines {
		return fmt.Errorf("%d engines in peers, want %d", len(m.Peers), cfg.Engines)
	}
	ctl := make([]*bufio.Writer, cfg.Engines)
	targets := make([]string, cfg.Engines)
	for e, p := range m.Peers {
		if isVelo {
			if err := registerPeer(node, p.Peer); err != nil {
				return fmt.Errorf("engine %d: %w", e, err)
			}
		}
		conn, err := net.Dial("tcp", p.Ctl)
		if err != nil {
			return fmt.Errorf("engine %d: control: %w", e, err)
		}
		defer conn.Close()
		ctl[e], targets[e] = bufio.NewWriter(conn), p.Addr
	}
	if c.arm == "grpc" {
		g, err := newGRPCFronts(1, targets)
		if err != nil {
			return err
		}
		defer g.close()
		fronts = g
	}
	if err := c.send(rpMsg{Op: "ready"}); err != nil {
		return err
	}
	if _, err := c.recv(ctx, "start"); err != nil {
		return err
	}

	runtime.GC()
	s0 := takeSnap(wc)
	if err := c.send(rpMsg{Op: "started"}); err != nil {
		return err
	}
	times := newRPTimes(cfg, rpWallClock)
	var consumers sync.WaitGroup
	setErr := func(err error) { fail(err) }
	var line []byte
	opened := 0
	t0 := rpWallClock()
	for i := c.index; i < cfg.Requests; i += cfg.AnchorHosts {
		e := i % cfg.Engines
		req, err := times.open(ctx, fronts, i, 0, e, &consumers, setErr)
		if err != nil {
			setErr(err)
			break
		}
		opened++
		line = appendDispatch(line[:0], i, req)
		_, err = ctl[e].Write(line)
		if err == nil {
			err = ctl[e].Flush()
		}
		if err != nil {
			setErr(fmt.Errorf("request %d: dispatch to engine %d: %w", i, e, err))
			break
		}
	}
	consumers.Wait()
	t1 := rpWallClock()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	// Every consumer returned nil: each response arrived whole and in
	// order (rpTimes.consume fails otherwise).
	if err := c.send(rpMsg{Op: "finished"}); err != nil {
		return err
	}
	if _, err := c.recv(ctx, "stop"); err != nil {
		return err
	}
	rep := &rpChildReport{Requests: opened, T0: t0, T1: t1}
	takeSnap(wc).fill(rep, s0)
	for i := c.index; i < cfg.Requests; i += cfg.AnchorHosts {
		rep.TTFT = append(rep.TTFT, times.ttft[i])
		rep.TokLat = append(rep.TokLat, times.tokLat[i*cfg.Tokens:(i+1)*cfg.Tokens]...)
	}
	if err := c.send(rpMsg{Op: "report", Report: rep}); err != nil {
		return err
	}
	_, err = c.recv(ctx, "exit")
	return err
}

// engine is the engine child: it serves the requests i with i%Engines ==
// index, which arrive over its control listener.
func (c *rpChild) engine(ctx context.Context, fail context.CancelCauseFunc) error {
	cfg := c.cfg
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	hello := rpHello{PID: os.Getpid(), Ctl: ln.Addr().String()}
	var engines rpEngines
	var wc rpWakeCounter
	var ve *veloEngines
	va, isVelo := veloArmOf(cfg, c.arm)
	switch {
	case isVelo:
		if ve, err = newVeloEngines(ctx, cfg, 1, va); err != nil {
			return err
		}
		defer ve.close()
		engines, wc = ve, ve
		pi := ve.engines[0].PeerInfo()
		hello.Peer = &pi
	case c.arm == "grpc":
		g, err := newGRPCEngines(1)
		if err != nil {
			return err
		}
		defer g.close()
		engines, hello.Addr = g, g.targets()[0]
	}

	// The requests of this engine, and the queue they go on; the last
	// one closes it.
	want := 0
	for i := c.index; i < cfg.Requests; i += cfg.Engines {
		want++
	}
	queue := make(chan rpQueued, want)
	if want == 0 {
		close(queue)
	}
	q := &rpControlQueue{ch: queue, want: int64(want)}
	// The control connections end with this function (a frontend that
	// has not closed its own yet is not waited for) or with the run.
	var conns sync.WaitGroup
	defer conns.Wait()
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer conn.Close()
				stop := context.AfterFunc(cctx, func() { conn.Close() })
				defer stop()
				if err := c.control(conn, q); err != nil {
					fail(err)
				}
			}()
		}
	}()

	if err := c.send(rpMsg{Op: "hello", Hello: &hello}); err != nil {
		return err
	}
	m, err := c.recv(ctx, "peers")
	if err != nil {
		return err
	}
	if len(m.Peers) != cfg.AnchorHosts {
		return fmt.Errorf("%d frontends in peers, want %d", len(m.Peers), cfg.AnchorHosts)
	}
	addrs := make([]string, cfg.AnchorHosts)
	for h, p := range m.Peers {
		if isVelo {
			if err := registerPeer(ve.engines[0], p.Peer); err != nil {
				return fmt.Errorf("frontend %d: %w", h, err)
			}
		}
		addrs[h] = p.Addr
	}
	if c.arm == "raw" {
		r, err := newRawEngines(cfg, 1, addrs)
		if err != nil {
			return err
		}
		defer r.close()
		engines = r
	}
	done := make(chan error, 1)
	go func() {
		err := rpEngine(ctx, cfg, engines, 0, queue, rpWallClock)
		if err != nil {
			fail(err)
		}
		done <- err
	}()
	if err := c.send(rpMsg{Op: "ready"}); err != nil {
		return err
	}
	if _, err := c.recv(ctx, "start"); err != nil {
		return err
	}

	runtime.GC()
	s0 := takeSnap(wc)
	if err := c.send(rpMsg{Op: "started"}); err != nil {
		return err
	}
	if _, err := c.recv(ctx, "stop"); err != nil {
		return err
	}
	// Every frontend has read every response whole: the window ends, as
	// it does in-process when the last consumer is done.
	s1 := takeSnap(wc)
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	rep := &rpChildReport{Requests: int(q.queued.Load())}
	s1.fill(rep, s0)
	if ve != nil {
		rep.Attaches = ve.attaches()
	}
	if err := c.send(rpMsg{Op: "report", Report: rep}); err != nil {
		return err
	}
	_, err = c.recv(ctx, "exit")
	return err
}

// rpControlQueue is an engine's queue as its control connections fill
// it: the want-th request closes it.
type rpControlQueue struct {
	ch       chan rpQueued
	want     int64
	reserved atomic.Int64 // requests taken off the connections
	queued   atomic.Int64 // requests on the queue
}

// put queues q; one request more than want is an error. A request is
// reserved before it is sent and counted after, so the close comes after
// every send.
func (c *rpControlQueue) put(q rpQueued) error {
	if c.reserved.Add(1) > c.want {
		return fmt.Errorf("more than the %d requests of this engine", c.want)
	}
	c.ch <- q // it holds every request of the engine: this never blocks
	if c.queued.Add(1) == c.want {
		close(c.ch)
	}
	return nil
}

// control reads the requests one frontend dispatches on conn and queues
// them.
func (c *rpChild) control(conn net.Conn, q *rpControlQueue) error {
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 4<<10), 1<<20)
	for sc.Scan() {
		var d rpDispatch
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return fmt.Errorf("control: %w", err)
		}
		if d.I < 0 || d.I >= c.cfg.Requests || d.I%c.cfg.Engines != c.index {
			return fmt.Errorf("control: request %d is not this engine's", d.I)
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
