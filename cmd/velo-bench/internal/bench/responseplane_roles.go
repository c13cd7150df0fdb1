package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"

	"github.com/velo-go/velo"
)

// The two roles of a --procs child. A frontend child owns its frontends'
// requests' streams and dispatches each to its engine over that engine's
// control connection; an engine child serves the requests that arrive on
// each of its engines' control listeners with the same batching loop as
// in-process. A child holds one or more nodes of its side (EngineProcs,
// FrontendProcs): local index j is global index lo+j.

// rpCtl is a frontend child's control connection to one engine. The
// closed loop's slots dispatch from many goroutines, so a line is written
// and flushed under the lock.
type rpCtl struct {
	mu   sync.Mutex
	w    *bufio.Writer
	line []byte
}

func (c *rpCtl) send(i int, req any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.line = appendDispatch(c.line[:0], i, req)
	if _, err := c.w.Write(c.line); err != nil {
		return err
	}
	return c.w.Flush()
}

// frontend is the frontend child: it holds frontends lo .. lo+k-1. In a
// batch, frontend h owns requests i with i%AnchorHosts == h and
// dispatches each to engine i%Engines; in a closed loop its slots do
// (rpLoad).
func (c *rpChild) frontend(ctx context.Context, fail context.CancelCauseFunc) error {
	cfg := c.cfg
	k := cfg.AnchorHosts / cfg.frontendProcs()
	lo := c.index * k
	hellos := make([]rpHello, k)
	for j := range hellos {
		hellos[j].PID = os.Getpid()
	}
	var fronts rpFrontends
	var wc rpWakeCounter
	var nodes []*velo.Node // the velo arms
	va, isVelo := veloArmOf(cfg, c.arm)
	switch {
	case isVelo:
		f, err := newVeloFronts(ctx, cfg, k, va)
		if err != nil {
			return err
		}
		defer f.close()
		fronts, wc, nodes = f, f, f.hosts
		for j, n := range nodes {
			pi := n.PeerInfo()
			hellos[j].Peer = &pi
		}
	case c.arm == "raw":
		f, err := newRawFronts(ctx, cfg, k)
		if err != nil {
			return err
		}
		defer f.close()
		fronts = f
		for j, a := range f.addrs() {
			hellos[j].Addr = a
		}
	}
	if err := c.send(rpMsg{Op: "hello", Hellos: hellos}); err != nil {
		return err
	}
	m, err := c.recv(ctx, "peers")
	if err != nil {
		return err
	}
	if len(m.Peers) != cfg.Engines {
		return fmt.Errorf("%d engines in peers, want %d", len(m.Peers), cfg.Engines)
	}
	ctl := make([]*rpCtl, cfg.Engines)
	targets := make([]string, cfg.Engines)
	for e, p := range m.Peers {
		for _, n := range nodes {
			if err := registerPeer(n, p.Peer); err != nil {
				return fmt.Errorf("engine %d: %w", e, err)
			}
		}
		conn, err := net.Dial("tcp", p.Ctl)
		if err != nil {
			return fmt.Errorf("engine %d: control: %w", e, err)
		}
		defer conn.Close()
		ctl[e], targets[e] = &rpCtl{w: bufio.NewWriter(conn)}, p.Addr
	}
	if c.arm == "grpc" {
		g, err := newGRPCFronts(k, targets)
		if err != nil {
			return err
		}
		defer g.close()
		fronts = g
	}
	if err := c.send(rpMsg{Op: "ready"}); err != nil {
		return err
	}
	if m, err = c.recv(ctx, "start"); err != nil {
		return err
	}
	runtime.GC()
	var rep *rpChildReport
	if cfg.Concurrency > 0 {
		rep, err = c.frontendClosed(ctx, fronts, lo, k, ctl, m.Window)
	} else {
		rep, err = c.frontendBatch(ctx, fail, fronts, wc, lo, k, ctl)
	}
	if err != nil {
		return err
	}
	if _, err := c.recv(ctx, "stop"); err != nil {
		return err
	}
	if err := c.send(rpMsg{Op: "report", Report: rep}); err != nil {
		return err
	}
	_, err = c.recv(ctx, "exit")
	return err
}

// frontendBatch dispatches the child's requests of the batch, waits until
// each is read whole and says finished.
func (c *rpChild) frontendBatch(ctx context.Context, fail context.CancelCauseFunc, fronts rpFrontends, wc rpWakeCounter, lo, k int, ctl []*rpCtl) (*rpChildReport, error) {
	cfg := c.cfg
	n, H := cfg.Requests, cfg.AnchorHosts
	s0 := takeSnap(wc)
	if err := c.send(rpMsg{Op: "started"}); err != nil {
		return nil, err
	}
	times := newRPTimes(cfg, rpWallClock)
	var consumers sync.WaitGroup
	setErr := func(err error) { fail(err) }
	// mine visits the child's requests in index order.
	mine := func(yield func(i, h int) bool) {
		for base := 0; base < n; base += H {
			for h := lo; h < lo+k && base+h < n; h++ {
				if !yield(base+h, h) {
					return
				}
			}
		}
	}
	opened := 0
	t0 := rpWallClock()
	for i, h := range mine {
		e := i % cfg.Engines
		req, err := times.open(ctx, fronts, i, h-lo, e, &consumers, setErr)
		if err != nil {
			setErr(err)
			break
		}
		opened++
		if err := ctl[e].send(i, req); err != nil {
			setErr(fmt.Errorf("request %d: dispatch to engine %d: %w", i, e, err))
			break
		}
	}
	consumers.Wait()
	t1 := rpWallClock()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	// Every consumer returned nil: each response arrived whole and in
	// order (rpTimes.consume fails otherwise).
	if err := c.send(rpMsg{Op: "finished"}); err != nil {
		return nil, err
	}
	rep := &rpChildReport{Requests: opened, T0: t0, T1: t1}
	takeSnap(wc).fill(rep, s0)
	for i := range mine {
		rep.TTFT = append(rep.TTFT, times.ttft[i])
		rep.TokLat = append(rep.TokLat, times.tokLat[i*cfg.Tokens:(i+1)*cfg.Tokens]...)
	}
	return rep, nil
}

// frontendClosed runs the closed loop of the child's frontends over the
// window the parent set, drains, and says finished.
func (c *rpChild) frontendClosed(ctx context.Context, fronts rpFrontends, lo, k int, ctl []*rpCtl, window []int64) (*rpChildReport, error) {
	if len(window) != 2 {
		return nil, fmt.Errorf("a closed loop's start without its window (%v)", window)
	}
	load := newRPLoad(c.cfg, rpWallClock, window[0], window[1])
	cpu := watchWindowCPU(ctx, rpWallClock, window[0], window[1])
	if err := c.send(rpMsg{Op: "started"}); err != nil {
		return nil, err
	}
	dispatch := func(_ context.Context, i, e int, req any) error { return ctl[e].send(i, req) }
	var running sync.WaitGroup
	for j := range k {
		running.Add(1)
		go func() {
			defer running.Done()
			load.front(ctx, fronts, j, lo+j, dispatch)
		}()
	}
	running.Wait()
	<-cpu.done
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if err := c.send(rpMsg{Op: "finished"}); err != nil {
		return nil, err
	}
	sum := load.summary()
	return &rpChildReport{CPUNS: int64(cpu.cpu), Requests: sum.Completed, Load: &sum}, nil
}

// engine is the engine child: it holds engines lo .. lo+k-1, each with a
// node (or server, or connections) and a control listener of its own.
func (c *rpChild) engine(ctx context.Context, fail context.CancelCauseFunc) error {
	cfg := c.cfg
	k := cfg.Engines / cfg.engineProcs()
	lo := c.index * k
	hellos := make([]rpHello, k)
	queues := make([]*rpControlQueue, k)
	// The control connections end with this function (a frontend that
	// has not closed its own yet is not waited for) or with the run.
	var conns sync.WaitGroup
	defer conns.Wait()
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	for j := range k {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		hellos[j] = rpHello{PID: os.Getpid(), Ctl: ln.Addr().String()}
		// A batch knows the engine's requests ahead: the last closes
		// the queue. A closed loop's queue holds every request that
		// can be open at once and closes at the end.
		q := &rpControlQueue{}
		if cfg.Concurrency > 0 {
			q.ch = make(chan rpQueued, cfg.Concurrency)
		} else {
			for i := lo + j; i < cfg.Requests; i += cfg.Engines {
				q.want++
			}
			q.ch = make(chan rpQueued, q.want)
			if q.want == 0 {
				q.end()
			}
		}
		queues[j] = q
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
					if err := c.control(conn, q, lo+j); err != nil {
						fail(err)
					}
				}()
			}
		}()
	}
	var engines rpEngines
	var wc rpWakeCounter
	var ve *veloEngines
	va, isVelo := veloArmOf(cfg, c.arm)
	switch {
	case isVelo:
		var err error
		if ve, err = newVeloEngines(ctx, cfg, k, va); err != nil {
			return err
		}
		defer ve.close()
		engines, wc = ve, ve
		for j, n := range ve.engines {
			pi := n.PeerInfo()
			hellos[j].Peer = &pi
		}
	case c.arm == "grpc":
		g, err := newGRPCEngines(k)
		if err != nil {
			return err
		}
		defer g.close()
		engines = g
		for j, t := range g.targets() {
			hellos[j].Addr = t
		}
	}
	if err := c.send(rpMsg{Op: "hello", Hellos: hellos}); err != nil {
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
		if ve != nil {
			for _, n := range ve.engines {
				if err := registerPeer(n, p.Peer); err != nil {
					return fmt.Errorf("frontend %d: %w", h, err)
				}
			}
		}
		addrs[h] = p.Addr
	}
	if c.arm == "raw" {
		r, err := newRawEngines(cfg, k, addrs)
		if err != nil {
			return err
		}
		defer r.close()
		engines = r
	}
	done := make(chan error, k)
	for j := range k {
		go func() {
			err := rpEngine(ctx, cfg, engines, j, queues[j].ch, rpWallClock)
			if err != nil {
				fail(fmt.Errorf("engine %d: %w", lo+j, err))
			}
			done <- err
		}()
	}
	if err := c.send(rpMsg{Op: "ready"}); err != nil {
		return err
	}
	if m, err = c.recv(ctx, "start"); err != nil {
		return err
	}

	runtime.GC()
	var cpu *rpWindowCPU
	var s0 rpSnap
	if cfg.Concurrency > 0 {
		if len(m.Window) != 2 {
			return fmt.Errorf("a closed loop's start without its window (%v)", m.Window)
		}
		cpu = watchWindowCPU(ctx, rpWallClock, m.Window[0], m.Window[1])
	} else {
		s0 = takeSnap(wc)
	}
	if err := c.send(rpMsg{Op: "started"}); err != nil {
		return err
	}
	if _, err := c.recv(ctx, "stop"); err != nil {
		return err
	}
	// Every frontend has read every response whole: the window ends, as
	// it does in-process when the last consumer is done. A closed loop's
	// window ended before, on its own clock.
	s1 := takeSnap(wc)
	for _, q := range queues {
		q.end()
	}
	for range k {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	rep := &rpChildReport{}
	for _, q := range queues {
		rep.Requests += q.count()
	}
	if cpu != nil {
		<-cpu.done
		rep.CPUNS = int64(cpu.cpu)
	} else {
		s1.fill(rep, s0)
	}
	if ve != nil {
		rep.Attaches = ve.attaches()
	}
	if err := c.send(rpMsg{Op: "report", Report: rep}); err != nil {
		return err
	}
	_, err = c.recv(ctx, "exit")
	return err
}
