package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/velo-go/velo"
)

// MsgThroughputConfig sets the messenger-level throughput harness: calls
// and messages through velo's Node API, against a raw socket and grpc-go
// doing the same work, in the same run.
type MsgThroughputConfig struct {
	Transport   string   // tcp or uds, for every arm (grpc too)
	Modes       []string // sequential, concurrent, pipelined
	Arms        []string // velo, raw, grpc
	Payload     int      // payload bytes of each call or message (at least 1)
	Concurrency int      // calls in flight in the concurrent mode
	Calls       int      // timed calls per sequential run; the other modes scale it (MsgOps)
	Reps        int
	// Timeout bounds one arm's run, set-up and teardown included: a run
	// that stalls fails with an error instead of hanging. 0 means
	// DefaultMsgTimeout.
	Timeout time.Duration
}

// DefaultMsgTimeout bounds one arm's run when the config sets none.
const DefaultMsgTimeout = 60 * time.Second

// Per-mode work, as a multiple of Calls: the concurrent and pipelined modes
// move several times more operations per second than the sequential mode,
// so these keep each run near a second on a 2-core machine.
const (
	msgConcurrentScale = 5
	msgPipelinedScale  = 25
)

// MsgModes and MsgArms are the modes and arms of the messenger level.
var (
	MsgModes = []string{"sequential", "concurrent", "pipelined"}
	MsgArms  = []string{"velo", "raw", "grpc"}
)

// MsgOps is how many timed operations one run of mode makes (calls, or
// messages in the pipelined mode).
func MsgOps(mode string, calls int) int {
	switch mode {
	case "concurrent":
		return calls * msgConcurrentScale
	case "pipelined":
		return calls * msgPipelinedScale
	}
	return calls
}

// msgResult is what one arm's run measured.
type msgResult struct {
	el     time.Duration
	lat    []time.Duration // per call; nil in the pipelined mode
	writes int             // write calls of a raw windowed sender (rawWindow), for its tests
	cpu    time.Duration   // the process's CPU over the timed part (pipelined mode only)
}

type msgArmFunc func(ctx context.Context, cfg MsgThroughputConfig, mode string, n int) (msgResult, error)

var msgArmFuncs = map[string]msgArmFunc{"velo": veloMsg, "raw": rawMsg, "grpc": grpcMsg}

// Validate checks the modes, arms and counts.
func (cfg MsgThroughputConfig) Validate() error {
	for _, m := range cfg.Modes {
		if !msgContains(MsgModes, m) {
			return fmt.Errorf("unknown messenger mode %q (want %v)", m, MsgModes)
		}
	}
	for _, a := range cfg.Arms {
		if msgArmFuncs[a] == nil {
			return fmt.Errorf("unknown messenger arm %q (want %v)", a, MsgArms)
		}
	}
	switch {
	case len(cfg.Modes) == 0 || len(cfg.Arms) == 0:
		return errors.New("messenger level needs at least one mode and one arm")
	case cfg.Payload < 1:
		return fmt.Errorf("payload must be at least 1 byte, got %d", cfg.Payload)
	case cfg.Concurrency < 1:
		return fmt.Errorf("concurrency must be at least 1, got %d", cfg.Concurrency)
	case cfg.Calls < 1:
		return fmt.Errorf("calls must be at least 1, got %d", cfg.Calls)
	case cfg.Reps < 1:
		return fmt.Errorf("reps must be at least 1, got %d", cfg.Reps)
	}
	return nil
}

func msgContains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// MsgParams are the parameters of the figures of one mode.
func (cfg MsgThroughputConfig) MsgParams(mode string) map[string]any {
	p := map[string]any{"level": "messenger", "transport": cfg.Transport, "mode": mode, "payload_bytes": cfg.Payload}
	switch mode {
	case "pipelined":
		p["msgs"] = MsgOps(mode, cfg.Calls)
	case "concurrent":
		p["concurrency"] = cfg.Concurrency
		p["calls"] = MsgOps(mode, cfg.Calls)
	default:
		p["calls"] = MsgOps(mode, cfg.Calls)
	}
	return p
}

// MsgThroughput measures calls and messages per second through the
// messenger (velo.Node), with a raw-socket arm and a grpc-go arm doing the
// same work in the same run:
//
//   - sequential: one unary call at a time; calls_per_s and latency.
//   - concurrent: Concurrency calls in flight; calls_per_s and latency.
//   - pipelined: one-way messages sent as fast as the sender can; msgs_per_s
//     once the receiver has seen the last one.
//
// Each rep runs every mode, and each mode every arm, the arm order rotated
// by one from rep to rep (see rotated) so that no arm always runs first. Every arm starts
// its own nodes or servers and stops them before the next arm starts; the
// run fails if goroutines are left behind or if an arm stalls past Timeout.
func MsgThroughput(cfg MsgThroughputConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, mode := range cfg.Modes {
			params := cfg.MsgParams(mode)
			n := MsgOps(mode, cfg.Calls)
			for _, arm := range rotated(cfg.Arms, rep) {
				res, err := msgRunArm(cfg, arm, mode, n)
				if err != nil {
					return fmt.Errorf("messenger %s %s (rep %d): %w", mode, arm, rep+1, err)
				}
				if mode == "pipelined" {
					r.Add("throughput", arm, "msgs_per_s", "per_s", float64(n)/res.el.Seconds(), params)
					if res.cpu > 0 {
						r.Add("throughput", arm, "cpu_ns_per_msg", "ns", float64(res.cpu.Nanoseconds())/float64(n), params)
					}
					continue
				}
				r.Add("throughput", arm, "calls_per_s", "per_s", float64(n)/res.el.Seconds(), params)
				lat := res.lat
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e3 }
				r.Add("throughput", arm, "lat_p50_us", "us", us(0.50), params)
				r.Add("throughput", arm, "lat_p95_us", "us", us(0.95), params)
				r.Add("throughput", arm, "lat_p99_us", "us", us(0.99), params)
			}
		}
	}
	if msgContains(cfg.Modes, "concurrent") {
		p := cfg.MsgParams("concurrent")
		v, okV := r.Find("throughput", "velo", "calls_per_s", p)
		g, okG := r.Find("throughput", "grpc", "calls_per_s", p)
		raw, okR := r.Find("throughput", "raw", "calls_per_s", p)
		if okV && okG {
			r.Ratio("throughput", "velo/grpc", "calls_per_s_ratio", v, g, p)
		}
		if okV && okR {
			r.Ratio("throughput", "velo/raw", "calls_per_s_ratio", v, raw, p)
		}
	}
	if msgContains(cfg.Modes, "sequential") {
		p := cfg.MsgParams("sequential")
		v, okV := r.Find("throughput", "velo", "lat_p50_us", p)
		raw, okR := r.Find("throughput", "raw", "lat_p50_us", p)
		if okV && okR {
			r.Ratio("throughput", "velo/raw", "lat_p50_ratio", v, raw, p)
		}
	}
	return nil
}

// msgRunArm runs one arm under a deadline and checks that it left no
// goroutine behind once its nodes, servers and sockets are closed.
func msgRunArm(cfg MsgThroughputConfig, arm, mode string, n int) (msgResult, error) {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultMsgTimeout
	}
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	res, err := msgArmFuncs[arm](ctx, cfg, mode, n)
	stalled := errors.Is(ctx.Err(), context.DeadlineExceeded)
	cancel()
	if err != nil {
		if stalled {
			return res, fmt.Errorf("stalled: not done within %v: %w", timeout, err)
		}
		return res, err
	}
	if res.el <= 0 {
		return res, errors.New("no time measured")
	}
	return res, msgSettle(before, 5*time.Second)
}

// msgSettle waits for the goroutine count to fall back to what it was
// before an arm ran: closing a connection or a server lets its goroutines
// exit, but not always before Close returns.
func msgSettle(before int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		now := runtime.NumGoroutine()
		if now <= before {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("goroutine leak: %d goroutines before the arm, %d still running %v after it stopped", before, now, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// msgWait waits for ch to close, or fails when ctx ends.
func msgWait(ctx context.Context, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	}
}

// msgSequential makes warm untimed calls, then n timed ones, one at a time.
func msgSequential(ctx context.Context, warm, n int, call func(context.Context) error) (msgResult, error) {
	for i := 0; i < warm; i++ {
		if err := call(ctx); err != nil {
			return msgResult{}, err
		}
	}
	lat := make([]time.Duration, 0, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := call(ctx); err != nil {
			return msgResult{}, err
		}
		lat = append(lat, time.Since(t0))
	}
	return msgResult{el: time.Since(start), lat: lat}, nil
}

// msgConcurrent makes warm untimed calls, then n timed ones, from conc
// goroutines that each take the next call until none is left. newCall
// gives each goroutine its own call function (and its own buffers). It
// returns after every goroutine has stopped; the first error cancels the
// others.
func msgConcurrent(ctx context.Context, conc, warm, n int, newCall func() func(context.Context) error) (msgResult, error) {
	if warm > 0 {
		if _, err := msgConcurrentPhase(ctx, conc, warm, newCall); err != nil {
			return msgResult{}, err
		}
	}
	return msgConcurrentPhase(ctx, conc, n, newCall)
}

func msgConcurrentPhase(ctx context.Context, conc, n int, newCall func() func(context.Context) error) (msgResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	lats := make([][]time.Duration, conc)
	calls := make([]func(context.Context) error, conc)
	for g := range calls {
		calls[g] = newCall()
	}
	start := time.Now()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			call := calls[g]
			lat := make([]time.Duration, 0, n/conc+1)
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				if err := call(ctx); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				lat = append(lat, time.Since(t0))
			}
			lats[g] = lat
		}(g)
	}
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		return msgResult{}, firstErr
	}
	all := make([]time.Duration, 0, n)
	for _, l := range lats {
		all = append(all, l...)
	}
	return msgResult{el: el, lat: all}, nil
}

// ---- velo arm ----

// veloMsg runs a mode through two velo nodes: Unary to "echo" for the
// call modes, Send to a counting FireHandler for the pipelined mode.
func veloMsg(ctx context.Context, cfg MsgThroughputConfig, mode string, n int) (msgResult, error) {
	a, b, stop, err := veloPair(context.Background(), cfg.Transport)
	if err != nil {
		return msgResult{}, err
	}
	defer stop()
	target := b.InstanceID()
	payload := make([]byte, cfg.Payload)
	unary := func() func(context.Context) error {
		return func(ctx context.Context) error {
			resp, err := a.Unary(ctx, target, "echo", payload)
			if err == nil && len(resp) != len(payload) {
				err = fmt.Errorf("echo answered %d bytes, want %d", len(resp), len(payload))
			}
			return err
		}
	}
	switch mode {
	case "sequential":
		return msgSequential(ctx, warmup, n, unary())
	case "concurrent":
		return msgConcurrent(ctx, cfg.Concurrency, warmup, n, unary)
	}
	// Pipelined: the handler counts, and closes warmed after the warm-up
	// messages and done after the last one.
	var seen atomic.Int64
	warmed, done := make(chan struct{}), make(chan struct{})
	warm, total := int64(warmup), int64(warmup+n)
	err = b.Register(velo.FireHandler("sink", func(*velo.Context) {
		switch seen.Add(1) {
		case warm:
			close(warmed)
		case total:
			close(done)
		}
	}))
	if err != nil {
		return msgResult{}, err
	}
	send := func(k int) error {
		for i := 0; i < k; i++ {
			if err := a.Send(ctx, target, "sink", payload); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(warmup); err != nil {
		return msgResult{}, err
	}
	if err := msgWait(ctx, warmed, "the warm-up messages"); err != nil {
		return msgResult{}, err
	}
	start, cpu0 := time.Now(), processCPU()
	if err := send(n); err != nil {
		return msgResult{}, err
	}
	if err := msgWait(ctx, done, fmt.Sprintf("the handler to see %d messages (saw %d)", total, seen.Load())); err != nil {
		return msgResult{}, err
	}
	return msgResult{el: time.Since(start), cpu: processCPU() - cpu0}, nil
}

// ---- raw arm ----

// rawMsg runs a mode on one plain socket pair: a fixed-size ping-pong for
// the sequential mode, length-prefixed frames for the others. Its writes
// coalesce as velo's do: the concurrent mode writes each batch of queued
// requests and of replies in one call (rawEchoWindow), the pipelined mode
// through a 64 KiB bufio.Writer.
func rawMsg(ctx context.Context, cfg MsgThroughputConfig, mode string, n int) (msgResult, error) {
	c, s, cleanup, err := socketPair(cfg.Transport)
	if err != nil {
		return msgResult{}, err
	}
	// Closing the sockets ends the server goroutine and the client's reader;
	// wait for both so that nothing outlives the arm.
	var wg sync.WaitGroup
	defer func() {
		cleanup()
		wg.Wait()
	}()
	// A stalled peer fails a read or write at the deadline.
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
		s.SetDeadline(dl)
	}
	switch mode {
	case "sequential":
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, cfg.Payload)
			defer s.Close() // the client's read fails now, not at the deadline
			for {
				if _, err := io.ReadFull(s, buf); err != nil {
					return
				}
				if _, err := s.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, cfg.Payload)
		return msgSequential(ctx, warmup, n, func(context.Context) error {
			if _, err := c.Write(buf); err != nil {
				return err
			}
			_, err := io.ReadFull(c, buf)
			return err
		})
	case "concurrent":
		return rawEchoWindow(c, s, cfg.Payload, warmup, n, cfg.Concurrency, &wg)
	}
	// Pipelined: the server counts the warm-up frames, says so, then counts
	// the timed ones. The client sends nothing between the two, so the
	// server's first reader holds no byte of the second batch.
	warmed := make(chan struct{})
	srvErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := rawCount(s, warmup, nil)
		if err == nil {
			close(warmed)
			err = rawCount(s, n, nil)
		}
		if err != nil {
			s.Close() // the client's writes fail now, not at the deadline
		}
		srvErr <- err
	}()
	w := bufio.NewWriterSize(c, 64<<10)
	frame := binary.BigEndian.AppendUint32(nil, uint32(cfg.Payload))
	frame = append(frame, make([]byte, cfg.Payload)...)
	send := func(k int) error {
		for i := 0; i < k; i++ {
			w.Write(frame)
		}
		return w.Flush()
	}
	if err := send(warmup); err != nil {
		return msgResult{}, err
	}
	select {
	case <-warmed:
	case err := <-srvErr:
		return msgResult{}, fmt.Errorf("server: %w", err)
	case <-ctx.Done():
		return msgResult{}, fmt.Errorf("waiting for the warm-up frames: %w", ctx.Err())
	}
	start, cpu0 := time.Now(), processCPU()
	if err := send(n); err != nil {
		return msgResult{}, err
	}
	select {
	case err := <-srvErr:
		if err != nil {
			return msgResult{}, fmt.Errorf("server: %w", err)
		}
	case <-ctx.Done():
		return msgResult{}, fmt.Errorf("waiting for the server to count %d frames: %w", n, ctx.Err())
	}
	return msgResult{el: time.Since(start), cpu: processCPU() - cpu0}, nil
}

// ---- grpc arm ----

// grpcMsg runs a mode against a grpc-go server on one ClientConn, over the
// same kind of socket as the other arms, with the raw-bytes codec: unary Invoke for the call modes. gRPC has no
// fire-and-forget unary, so the pipelined mode sends its messages on one
// client-streaming RPC, and the clock stops when the server's count of
// them comes back after CloseSend.
func grpcMsg(ctx context.Context, cfg MsgThroughputConfig, mode string, n int) (msgResult, error) {
	serve := grpcEchoServer
	if mode == "pipelined" {
		serve = grpcSinkServer
	}
	target, stop, err := serve(cfg.Transport)
	if err != nil {
		return msgResult{}, err
	}
	defer stop()
	cc, err := grpcClientOver(cfg.Transport, target)
	if err != nil {
		return msgResult{}, err
	}
	defer cc.Close()
	payload := make([]byte, cfg.Payload)
	unary := func() func(context.Context) error {
		var resp []byte
		return func(ctx context.Context) error {
			err := grpcCall(ctx, cc, payload, &resp)
			if err == nil && len(resp) != len(payload) {
				err = fmt.Errorf("echo answered %d bytes, want %d", len(resp), len(payload))
			}
			return err
		}
	}
	switch mode {
	case "sequential":
		return msgSequential(ctx, warmup, n, unary())
	case "concurrent":
		return msgConcurrent(ctx, cfg.Concurrency, warmup, n, unary)
	}
	if err := grpcSinkStream(ctx, cc, payload, warmup); err != nil {
		return msgResult{}, err
	}
	start, cpu0 := time.Now(), processCPU()
	if err := grpcSinkStream(ctx, cc, payload, n); err != nil {
		return msgResult{}, err
	}
	return msgResult{el: time.Since(start), cpu: processCPU() - cpu0}, nil
}

const grpcSinkMethod = "/velo.bench.Sink/Sink"

var grpcSinkDesc = grpc.StreamDesc{StreamName: "Sink", ClientStreams: true}

// grpcSinkServer starts a grpc-go server whose one client-streaming method
// counts the messages of a stream and answers with the count (8 bytes,
// big-endian) when the client closes its side.
func grpcSinkServer(kind string) (target string, stop func(), err error) {
	desc := grpcSinkDesc
	desc.Handler = func(_ any, st grpc.ServerStream) error {
		var n uint64
		var buf []byte
		for {
			if err := st.RecvMsg(&buf); err != nil {
				if !errors.Is(err, io.EOF) {
					return err
				}
				out := binary.BigEndian.AppendUint64(nil, n)
				return st.SendMsg(&out)
			}
			n++
		}
	}
	return grpcServe(kind, &grpc.ServiceDesc{
		ServiceName: "velo.bench.Sink",
		HandlerType: (*any)(nil),
		Streams:     []grpc.StreamDesc{desc},
	})
}

// grpcSinkStream sends n messages on one client stream and checks the
// server's count.
func grpcSinkStream(ctx context.Context, cc *grpc.ClientConn, payload []byte, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cc.NewStream(ctx, &grpcSinkDesc, grpcSinkMethod)
	if err != nil {
		return err
	}
	var resp []byte
	for i := 0; i < n; i++ {
		if err := st.SendMsg(&payload); err != nil {
			if errors.Is(err, io.EOF) {
				// The stream ended early; its status says why.
				err = st.RecvMsg(&resp)
			}
			return fmt.Errorf("send %d of %d: %w", i+1, n, err)
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if err := st.RecvMsg(&resp); err != nil {
		return err
	}
	if len(resp) != 8 || binary.BigEndian.Uint64(resp) != uint64(n) {
		return fmt.Errorf("server counted %x, want %d messages", resp, n)
	}
	return nil
}
