package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
	"github.com/velo-go/velo/ext"
	grpctr "github.com/velo-go/velo/transport/grpc"
	"github.com/velo-go/velo/transport/tcp"
)

// A child: one velo node that runs the workload against every peer the
// driver names, records what it sends in an Outbox and what it receives
// in an Inbox, and reports them at the end.

// errParentGone ends a child whose driver closed its stdin early.
var errParentGone = errors.New("soak: the driver closed stdin")

type child struct {
	cfg  ChildConfig
	node *velo.Node
	out  *Outbox
	in   *Inbox

	outMu sync.Mutex
	w     io.Writer
	msgs  chan msg

	ops, items, bytes, errs atomic.Int64
	errMu                   sync.Mutex
	errKinds                map[string]int64
	errFirst                map[string]string // the first message of each kind
	total, second           Hist
	leak                    chan struct{} // never closed: the test leak parks on it
}

// Child serves as one child of a soak run over in and out; it returns
// when the driver says exit, or with what went wrong (also told to the
// driver).
func Child(in io.Reader, out io.Writer) (err error) {
	slog.SetLogLoggerLevel(slog.LevelError)
	c := &child{w: out, msgs: make(chan msg, 8), out: NewOutbox(), in: NewInbox(),
		errKinds: map[string]int64{}, errFirst: map[string]string{}, leak: make(chan struct{})}
	ctx, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	go c.read(in, fail)
	defer func() {
		if err != nil && !errors.Is(err, errParentGone) {
			c.send(msg{Op: "error", Err: err.Error()})
		}
	}()
	m, err := c.recv(ctx, "config")
	if err != nil {
		return err
	}
	c.cfg = *m.Config
	if err := c.start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		c.node.Shutdown(sctx)
	}()
	info := c.node.PeerInfo()
	if err := c.send(msg{Op: "hello", Peer: &info}); err != nil {
		return err
	}
	return c.serve(ctx)
}

func (c *child) serve(ctx context.Context) error {
	m, err := c.recv(ctx, "peers")
	if err != nil {
		return err
	}
	var peers []ext.InstanceID
	for _, p := range m.Peers {
		if err := c.node.RegisterPeer(p); err != nil {
			return err
		}
		peers = append(peers, p.InstanceID)
	}
	for _, p := range peers {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.node.WaitForHandler(wctx, p, handlerBarrier)
		cancel()
		if err != nil {
			return fmt.Errorf("peer %v: %w", p, err)
		}
	}
	if err := c.send(msg{Op: "ready"}); err != nil {
		return err
	}
	if _, err := c.recv(ctx, "run"); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.runWorkload(runCtx, peers) }()
	go c.tick(runCtx)
	_, err = c.recv(ctx, "stop")
	stop()
	<-done
	if err != nil {
		return err
	}
	if err := c.barrier(ctx, peers); err != nil {
		return err
	}
	if err := c.send(msg{Op: "stopped"}); err != nil {
		return err
	}
	if _, err := c.recv(ctx, "report"); err != nil {
		return err
	}
	c.errMu.Lock()
	kinds := make(map[string]int64, len(c.errKinds))
	first := make(map[string]string, len(c.errFirst))
	for k, v := range c.errKinds {
		kinds[k], first[k] = v, c.errFirst[k]
	}
	c.errMu.Unlock()
	rep := &Ledger{Sent: c.out.Keys(), Got: c.in.Keys(), Latency: c.total.Take(), Errors: kinds, FirstErrors: first,
		Ops: c.ops.Load(), Items: c.items.Load(), Bytes: c.bytes.Load()}
	if err := c.send(msg{Op: "report", Report: rep}); err != nil {
		return err
	}
	_, err = c.recv(ctx, "exit")
	return err
}

// start builds the node and registers the workload's handlers.
func (c *child) start(ctx context.Context) error {
	tr, err := c.transport()
	if err != nil {
		return err
	}
	if c.node, err = velo.New(ctx, velo.WithTransport(tr)); err != nil {
		return err
	}
	return c.register()
}

// transport builds the configured transport; behind a proxy, on the
// listen address the driver chose, advertising the proxy's.
func (c *child) transport() (ext.Transport, error) {
	if c.cfg.AdvertiseAddr == "" {
		return bench.NewTransport(c.cfg.Transport)
	}
	switch c.cfg.Transport {
	case "tcp":
		return tcp.New(tcp.WithListenAddr(c.cfg.ListenAddr), tcp.WithAdvertiseAddr(c.cfg.AdvertiseAddr))
	case "grpc":
		return grpctr.New(grpctr.WithListenAddr(c.cfg.ListenAddr), grpctr.WithAdvertiseAddr(c.cfg.AdvertiseAddr))
	}
	return nil, fmt.Errorf("--faults: no proxy for transport %q (tcp or grpc)", c.cfg.Transport)
}

// tick sends a sample a second: the goroutine floor of ten readings,
// the counters, the latency of the second.
func (c *child) tick(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	floor, n := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g := runtime.NumGoroutine()
		if n == 0 || g < floor {
			floor = g
		}
		if n++; n < 10 {
			continue
		}
		h := c.second.Take()
		c.send(msg{Op: "sample", Sample: &Tick{Goroutines: floor, Ops: c.ops.Load(), Items: c.items.Load(),
			Bytes: c.bytes.Load(), Errors: c.errs.Load(), P50: int64(h.Quantile(0.5)), P99: int64(h.Quantile(0.99))}})
		n = 0
	}
}

// fail counts a failed operation by its error's code.
func (c *child) fail(op string, err error) {
	c.errs.Add(1)
	kind := op + ": " + fmt.Sprint(velo.ErrorCode(err))
	if errors.Is(err, context.DeadlineExceeded) {
		kind = op + ": timeout"
	}
	c.errMu.Lock()
	if c.errKinds[kind] == 0 {
		c.errFirst[kind] = err.Error()
	}
	c.errKinds[kind]++
	c.errMu.Unlock()
}

// took records one operation's latency.
func (c *child) took(d time.Duration) {
	c.ops.Add(1)
	c.total.Add(d)
	c.second.Add(d)
}

// leakOne is the test switch: a goroutine parked for good per request.
func (c *child) leakOne() {
	if c.cfg.Leak {
		go func() { <-c.leak }()
	}
}

func (c *child) read(in io.Reader, fail context.CancelCauseFunc) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var m msg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			fail(fmt.Errorf("a bad line from the driver: %w", err))
			return
		}
		c.msgs <- m
		if m.Op == "exit" {
			return
		}
	}
	fail(errParentGone)
}

func (c *child) recv(ctx context.Context, op string) (msg, error) {
	select {
	case m := <-c.msgs:
		if m.Op != op {
			return m, fmt.Errorf("the driver said %q, want %q", m.Op, op)
		}
		if op == "config" && m.Config == nil {
			return m, errors.New("config without a config")
		}
		return m, nil
	case <-ctx.Done():
		return msg{}, context.Cause(ctx)
	}
}

func (c *child) send(m msg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.outMu.Lock()
	defer c.outMu.Unlock()
	_, err = c.w.Write(append(b, '\n'))
	return err
}
