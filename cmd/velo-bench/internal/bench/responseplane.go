package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/streamx"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// The response-plane harness models the serving shape the mux exists for. Anchor hosts stand in for
// frontends and own one response stream per request. Engines run
// continuous batching: each forward pass puts exactly one token on every
// active request's stream. Requests reach the engines round-robin over an
// in-process channel, and the response path is real: frontends and
// engines are separate nodes, so every attach and every token crosses
// loopback TCP.
//
// Arms, interleaved per rep (rotated):
//   - mux: velo with the messenger mux (every Sender must negotiate
//     messenger-mux-v2, or the run fails);
//   - mux-zero-rtt: the same nodes, but the frontend pre-binds the anchor
//     when it registers the request (PrebindAnchor) and the ticket rides
//     with the request to the engine, which opens the stream with
//     OpenAnchorStream: no attach round trip before the first token;
//   - per-stream: the same velo code with the mux off (one TCP connection
//     per stream; every Sender must negotiate tcp-stream);
//   - grpc: grpc-go, one server-streaming call per request over one
//     HTTP/2 connection per frontend–engine pair; the engine is the gRPC
//     server and streams the tokens;
//   - raw: no protocol at all, the floor under any Go plane with a
//     goroutine per request: each engine writes a pass's tokens for a
//     frontend in one write, and a reader hands them to the consumers
//     over channels (responseplane_raw.go).

// ResponsePlaneArms are the arms of the response-plane harness.
var ResponsePlaneArms = []string{"mux", "mux-zero-rtt", "per-stream", "grpc", "raw"}

const responsePlaneHarness = "response-plane"

// rpTokenBytes is the size of one token's payload.
const rpTokenBytes = 40

// ResponsePlaneConfig sets the response-plane harness.
type ResponsePlaneConfig struct {
	Arms        []string
	AnchorHosts int // frontends
	Engines     int
	Requests    int
	MaxBatch    int // active requests per engine
	Tokens      int // tokens in every request
	PassDelay   time.Duration
	// Flush is the mux flush policy of the engines: manual (FlushBatch
	// once per pass), auto, or auto-linger (FlushLinger with the window
	// LingerUS and the early ends OnComplete and AtBytes).
	Flush      string
	LingerUS   int  // auto-linger: MaxLinger in microseconds (0: velo's default, 2 ms)
	OnComplete bool // auto-linger: end the window once every live slot has a record
	AtBytes    int  // auto-linger: end the window at this many staged bytes (0: no limit)
	// FrontendFlush is the mux flush policy of the anchor hosts, which
	// send only control (credit replies); "" is auto. A frontend never
	// calls FlushBatch.
	FrontendFlush string
	InitialCredit uint32 // mux credit window; 0 is velo's default
	// Lanes builds the TCP transport of every velo node WithLanes(Lanes)
	// (0 or 1: one lane, the transport's default). The grpc arm has no
	// lanes.
	Lanes int
	Reps  int
	// Timeout bounds one arm of one rep; a run that takes longer fails.
	Timeout time.Duration
	// Samples, when set, collects every arm's TTFT and token latencies
	// over all reps (for --plot).
	Samples *ResponsePlaneSamples
}

// ResponsePlaneSamples holds the raw latencies of a run, pooled over the
// reps, by arm in the order the arms were given.
type ResponsePlaneSamples struct {
	Arms []string
	// TTFT and TokenLatency are in nanoseconds, by arm.
	TTFT, TokenLatency map[string][]int64
}

func (s *ResponsePlaneSamples) add(arm string, ttft, tokLat []int64) {
	if s.TTFT == nil {
		s.TTFT, s.TokenLatency = map[string][]int64{}, map[string][]int64{}
	}
	if !slices.Contains(s.Arms, arm) {
		s.Arms = append(s.Arms, arm)
	}
	s.TTFT[arm] = append(s.TTFT[arm], ttft...)
	s.TokenLatency[arm] = append(s.TokenLatency[arm], tokLat...)
}

// Validate reports a config that cannot run.
func (c ResponsePlaneConfig) Validate() error {
	if len(c.Arms) == 0 {
		return errors.New("no arm to run")
	}
	for _, a := range c.Arms {
		if !slices.Contains(ResponsePlaneArms, a) {
			return fmt.Errorf("unknown arm %q (want %v)", a, ResponsePlaneArms)
		}
	}
	if c.AnchorHosts < 1 || c.Engines < 1 || c.Requests < 1 || c.MaxBatch < 1 || c.Tokens < 1 || c.Reps < 1 {
		return errors.New("anchor hosts, engines, requests, max batch, tokens and reps must be positive")
	}
	if c.PassDelay < 0 {
		return errors.New("pass delay must not be negative")
	}
	if c.Flush != "manual" && c.Flush != "auto" && c.Flush != "auto-linger" {
		return fmt.Errorf("unknown flush policy %q (want manual, auto or auto-linger)", c.Flush)
	}
	if c.Flush != "auto-linger" && (c.LingerUS != 0 || c.OnComplete || c.AtBytes != 0) {
		return errors.New("linger, on-complete and at-bytes need flush policy auto-linger")
	}
	if c.LingerUS < 0 || c.AtBytes < 0 {
		return errors.New("linger and at-bytes must not be negative")
	}
	if c.FrontendFlush != "" && c.FrontendFlush != "manual" && c.FrontendFlush != "auto" {
		return fmt.Errorf("unknown frontend flush policy %q (want manual or auto)", c.FrontendFlush)
	}
	if c.Lanes < 0 || c.Lanes > muxwire.Lanes {
		return fmt.Errorf("lanes %d out of range 1..%d", c.Lanes, muxwire.Lanes)
	}
	return nil
}

// newTCP builds the TCP transport of a velo node of the run.
func (c ResponsePlaneConfig) newTCP() (ext.Transport, error) {
	if c.Lanes <= 1 {
		return NewTransport("tcp")
	}
	return tcp.New(append(tcpBufferOption(), tcp.WithLanes(c.Lanes))...)
}

// rpStream is one request's response stream as the engine sees it.
type rpStream interface {
	send(ctx context.Context, token []byte) error
	finish() error
}

// rpPlane is one arm's set of frontends and engines.
type rpPlane interface {
	// open is the frontend side of request i: it creates the response
	// stream on frontend h towards engine e, starts a goroutine that runs
	// consume on what arrives, and returns what the engine needs to bind.
	open(ctx context.Context, i, h, e int, consume func(next func() ([]byte, error)) error) (any, error)
	// bind is the engine side: engine e takes over the stream of a
	// dispatched request.
	bind(ctx context.Context, e int, req any) (rpStream, error)
	// pass ends one forward pass of engine e (the manual flush).
	pass(e int)
	close()
}

// rpWakes are the wake counters of a velo plane, summed over its nodes.
type rpWakes struct {
	engineBatcher, hostBatcher uint64 // mux batcher goroutine wakes
	hostConsumer               uint64 // consumers woken in NextBytes
	engineBatches, hostBatches uint64 // mux batches sent
	creditExhausted            uint64 // engines' sends that found their slot without credit
}

// rpWakeCounter is a plane that can count its wakes (the velo arms).
type rpWakeCounter interface {
	wakes() rpWakes
	muxed() bool // false: there is no batcher, its counts do not apply
}

// ResponsePlane runs the harness and adds its figures to r.
func ResponsePlane(cfg ResponsePlaneConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Samples != nil {
		cfg.Samples.Arms = slices.Clone(cfg.Arms)
	}
	if cfg.FrontendFlush == "" {
		cfg.FrontendFlush = "auto"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	params := map[string]any{"anchor_hosts": cfg.AnchorHosts, "engines": cfg.Engines, "requests": cfg.Requests,
		"max_batch": cfg.MaxBatch, "tokens": cfg.Tokens, "pass_delay_ms": float64(cfg.PassDelay) / float64(time.Millisecond),
		"flush_policy": cfg.Flush, "frontend_flush_policy": cfg.FrontendFlush, "procs": runtime.GOMAXPROCS(0)}
	if cfg.Lanes > 1 {
		// Only then, so that one-lane figures keep the params they had.
		params["lanes"] = cfg.Lanes
	}
	if cfg.Flush == "auto-linger" {
		params["linger_us"], params["on_complete"], params["at_bytes"] = cfg.LingerUS, cfg.OnComplete, cfg.AtBytes
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, arm := range rotated(cfg.Arms, rep) {
			if err := responsePlaneRun(cfg, arm, params, r); err != nil {
				return fmt.Errorf("%s, rep %d: %w", arm, rep+1, err)
			}
		}
	}
	for _, pair := range [][2]string{{"mux", "grpc"}, {"mux", "per-stream"}, {"mux", "raw"}, {"raw", "grpc"}} {
		if !slices.Contains(cfg.Arms, pair[0]) || !slices.Contains(cfg.Arms, pair[1]) {
			continue
		}
		for _, metric := range []string{"cpu_us_per_token", "tokens_per_s"} {
			num, _ := r.Find(responsePlaneHarness, pair[0], metric, params)
			den, _ := r.Find(responsePlaneHarness, pair[1], metric, params)
			r.Ratio(responsePlaneHarness, pair[0]+"/"+pair[1], metric+"_ratio", num, den, params)
		}
	}
	if slices.Contains(cfg.Arms, "mux") && slices.Contains(cfg.Arms, "mux-zero-rtt") {
		for _, metric := range []string{"ttft_p50_ms", "tokens_per_s", "cpu_us_per_token"} {
			num, _ := r.Find(responsePlaneHarness, "mux-zero-rtt", metric, params)
			den, _ := r.Find(responsePlaneHarness, "mux", metric, params)
			r.Ratio(responsePlaneHarness, "mux-zero-rtt/mux", metric+"_ratio", num, den, params)
		}
	}
	return nil
}

// engineMuxConfig is the engines' mux config for cfg's flush policy.
func engineMuxConfig(cfg ResponsePlaneConfig) streaming.MuxConfig {
	mc := streaming.MuxConfig{InitialCredit: cfg.InitialCredit}
	switch cfg.Flush {
	case "manual":
		mc.Flush = streaming.FlushManual
	case "auto-linger":
		mc.Flush = streaming.FlushLinger
		mc.MaxLinger = time.Duration(cfg.LingerUS) * time.Microsecond
		mc.OnComplete, mc.AtBytes = cfg.OnComplete, cfg.AtBytes
	}
	return mc
}

func newPlane(ctx context.Context, cfg ResponsePlaneConfig, arm string) (rpPlane, error) {
	switch arm {
	case "mux", "mux-zero-rtt":
		host := streaming.MuxConfig{InitialCredit: cfg.InitialCredit}
		if cfg.FrontendFlush == "manual" {
			host.Flush = streaming.FlushManual
		}
		p, err := newVeloPlane(ctx, cfg, host, engineMuxConfig(cfg), "messenger-mux-v2")
		if p != nil {
			p.zeroRTT = arm == "mux-zero-rtt"
		}
		return p, err
	case "per-stream":
		off := streaming.MuxConfig{Disabled: true}
		return newVeloPlane(ctx, cfg, off, off, wire.TCPStreamKey)
	case "grpc":
		return newGRPCPlane(cfg)
	case "raw":
		return newRawPlane(ctx, cfg)
	}
	return nil, fmt.Errorf("unknown arm %q", arm)
}

// responsePlaneRun is one arm of one rep on fresh nodes.
func responsePlaneRun(cfg ResponsePlaneConfig, arm string, params map[string]any, r *Report) error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), cfg.Timeout, errors.New("run timed out"))
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	plane, err := newPlane(ctx, cfg, arm)
	if err != nil {
		return err
	}
	defer plane.close()

	n, T := cfg.Requests, cfg.Tokens
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	dispatched := make([]int64, n)
	ttft := make([]int64, n)
	tokLat := make([]int64, n*T)
	var errMu sync.Mutex
	var firstErr error
	setErr := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		fail(err)
	}

	queues := make([]chan rpQueued, cfg.Engines)
	for e := range queues {
		queues[e] = make(chan rpQueued, n)
	}
	var engines sync.WaitGroup
	for e := range cfg.Engines {
		engines.Add(1)
		go func() {
			defer engines.Done()
			if err := rpEngine(ctx, cfg, plane, e, queues[e], now); err != nil {
				setErr(fmt.Errorf("engine %d: %w", e, err))
			}
		}()
	}

	runtime.GC()
	wc, counting := plane.(rpWakeCounter)
	var wakes0 rpWakes
	if counting {
		wakes0 = wc.wakes()
	}
	writes0, cpu0, t0 := writeSyscalls(), processCPU(), time.Now()
	var consumers sync.WaitGroup
	for i := 0; i < n; i++ {
		h, e := i%cfg.AnchorHosts, i%cfg.Engines
		consume := func(next func() ([]byte, error)) error {
			for pos := 0; ; pos++ {
				p, err := next()
				if errors.Is(err, io.EOF) {
					if pos != T {
						return fmt.Errorf("request %d: %d tokens, want %d", i, pos, T)
					}
					return nil
				}
				if err != nil {
					return fmt.Errorf("request %d, token %d: %w", i, pos, err)
				}
				at := now()
				if len(p) != rpTokenBytes {
					return fmt.Errorf("request %d: token of %d bytes", i, len(p))
				}
				idx, got := binary.BigEndian.Uint64(p), int(binary.BigEndian.Uint32(p[8:]))
				if idx != uint64(i) || got != pos {
					return fmt.Errorf("request %d: got token %d of request %d at position %d", i, got, idx, pos)
				}
				if pos == 0 {
					ttft[i] = at - dispatched[i]
				}
				if pos < T {
					tokLat[i*T+pos] = at - int64(binary.BigEndian.Uint64(p[12:]))
				}
			}
		}
		consumers.Add(1)
		dispatched[i] = now()
		req, err := plane.open(ctx, i, h, e, func(next func() ([]byte, error)) error {
			defer consumers.Done()
			err := consume(next)
			if err != nil {
				setErr(err)
			}
			return err
		})
		if err != nil {
			consumers.Done()
			setErr(fmt.Errorf("request %d: open: %w", i, err))
			break
		}
		queues[e] <- rpQueued{idx: i, req: req}
	}
	for _, q := range queues {
		close(q)
	}
	consumers.Wait()
	wall, cpu, writes := time.Since(t0), processCPU()-cpu0, writeSyscalls()-writes0
	var wakes1 rpWakes
	if counting {
		// Every consumer has read its terminal, so every token and
		// terminal has left its batcher; control that is still in flight
		// (late credit replies) is not counted.
		wakes1 = wc.wakes()
	}
	engines.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if vp, ok := plane.(*veloPlane); ok && vp.attachTaps != nil {
		// Every mux request attaches once; a zero-RTT request never.
		switch got := vp.attaches(); {
		case vp.zeroRTT && got != 0:
			return fmt.Errorf("the engines sent %d _anchor_attach requests, want none", got)
		case !vp.zeroRTT && got < uint64(n):
			return fmt.Errorf("the engines sent %d _anchor_attach requests for %d requests", got, n)
		}
	}

	tokens := float64(n * T)
	r.Add(responsePlaneHarness, arm, "requests_per_s", "per_s", float64(n)/wall.Seconds(), params)
	r.Add(responsePlaneHarness, arm, "tokens_per_s", "per_s", tokens/wall.Seconds(), params)
	r.Add(responsePlaneHarness, arm, "cpu_us_per_token", "us", float64(cpu.Nanoseconds())/tokens/1e3, params)
	if writes > 0 {
		r.Add(responsePlaneHarness, arm, "tokens_per_write", "ratio", tokens/float64(writes), params)
	}
	if counting {
		// Wakes per token: the engines' batchers per token sent, the
		// frontends' consumers per token read. The per-stream path has
		// no batcher, so it reports the consumers alone.
		if wc.muxed() {
			r.Add(responsePlaneHarness, arm, "engine_batcher_wakes_per_token", "ratio",
				float64(wakes1.engineBatcher-wakes0.engineBatcher)/tokens, params)
			r.Add(responsePlaneHarness, arm, "frontend_batcher_wakes_per_token", "ratio",
				float64(wakes1.hostBatcher-wakes0.hostBatcher)/tokens, params)
			// Batches per token: the engines' carry tokens (and opens
			// and closes), the frontends' carry credit replies and closes.
			r.Add(responsePlaneHarness, arm, "engine_batches_per_token", "ratio",
				float64(wakes1.engineBatches-wakes0.engineBatches)/tokens, params)
			r.Add(responsePlaneHarness, arm, "frontend_batches_per_token", "ratio",
				float64(wakes1.hostBatches-wakes0.hostBatches)/tokens, params)
			r.Add(responsePlaneHarness, arm, "credit_exhausted_count", "count",
				float64(wakes1.creditExhausted-wakes0.creditExhausted), params)
		}
		r.Add(responsePlaneHarness, arm, "consumer_wakes_per_token", "ratio",
			float64(wakes1.hostConsumer-wakes0.hostConsumer)/tokens, params)
	}
	if cfg.Samples != nil {
		cfg.Samples.add(arm, ttft, tokLat)
	}
	addQuantiles(r, arm, "ttft_", "ms", 1e6, ttft, []float64{0.5, 0.95, 0.99}, params)
	addQuantiles(r, arm, "token_latency_", "us", 1e3, tokLat, []float64{0.5, 0.95, 0.99}, params)
	return nil
}

// addQuantiles adds prefix+"pNN_"+unit for each q of ns (nanoseconds),
// divided by div.
func addQuantiles(r *Report, arm, prefix, unit string, div float64, ns []int64, qs []float64, params map[string]any) {
	s := slices.Clone(ns)
	slices.Sort(s)
	for _, q := range qs {
		v := float64(s[int(q*float64(len(s)-1))]) / div
		r.Add(responsePlaneHarness, arm, fmt.Sprintf("%sp%d_%s", prefix, int(q*100+0.5), unit), unit, v, params)
	}
}

// writeSyscalls is the write system calls this process has made
// (/proc/self/io syscw: write, writev and their kin), or 0 where that
// file is missing. Both ends of every arm live in this process, so a
// delta counts the writes of frontends and engines, control included.
func writeSyscalls() uint64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// rpQueued is a dispatched request on an engine's queue.
type rpQueued struct {
	idx int
	req any
}

// rpEngine is one engine's continuous batching loop: admit queued requests
// up to MaxBatch, then one forward pass puts one token on every active
// stream, finishes the streams that reached Tokens, ends the pass, and
// waits PassDelay.
func rpEngine(ctx context.Context, cfg ResponsePlaneConfig, plane rpPlane, e int, queue <-chan rpQueued, now func() int64) error {
	type active struct {
		st  rpStream
		idx uint64
		pos int
	}
	batch := make([]active, 0, cfg.MaxBatch)
	open := true
	admit := func(q rpQueued) error {
		st, err := plane.bind(ctx, e, q.req)
		if err != nil {
			return fmt.Errorf("request %d: bind: %w", q.idx, err)
		}
		batch = append(batch, active{st: st, idx: uint64(q.idx)})
		return nil
	}
	for open || len(batch) > 0 {
		// Admission: wait only when the batch is empty.
	admitting:
		for open && len(batch) < cfg.MaxBatch {
			if len(batch) == 0 {
				select {
				case q, ok := <-queue:
					if !ok {
						open = false
						break admitting
					}
					if err := admit(q); err != nil {
						return err
					}
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				continue
			}
			select {
			case q, ok := <-queue:
				if !ok {
					open = false
					break admitting
				}
				if err := admit(q); err != nil {
					return err
				}
			default:
				break admitting
			}
		}
		if len(batch) == 0 {
			continue
		}
		// One forward pass.
		for j := range batch {
			a := &batch[j]
			tok := make([]byte, rpTokenBytes) // grpc may hold a sent message: a fresh buffer per token
			binary.BigEndian.PutUint64(tok, a.idx)
			binary.BigEndian.PutUint32(tok[8:], uint32(a.pos))
			binary.BigEndian.PutUint64(tok[12:], uint64(now()))
			if err := a.st.send(ctx, tok); err != nil {
				return fmt.Errorf("request %d, token %d: %w", a.idx, a.pos, err)
			}
			a.pos++
		}
		kept := batch[:0]
		for _, a := range batch {
			if a.pos < cfg.Tokens {
				kept = append(kept, a)
				continue
			}
			if err := a.st.finish(); err != nil {
				return fmt.Errorf("request %d: finish: %w", a.idx, err)
			}
		}
		clear(batch[len(kept):])
		batch = kept
		plane.pass(e)
		if cfg.PassDelay > 0 {
			time.Sleep(cfg.PassDelay)
		}
	}
	return nil
}

// veloPlane is the velo arms: AnchorHosts frontend nodes and Engines
// engine nodes, each its own velo node on loopback TCP, every frontend
// registered with every engine.
type veloPlane struct {
	hosts, engines []*velo.Node
	wantKey        string
	manual         bool
	// zeroRTT: the frontend pre-binds at registration and the engine
	// opens from the ticket (mux-zero-rtt).
	zeroRTT bool
	// attachTaps count the _anchor_attach requests each engine sends (the
	// mux arms): the zero-RTT arm must send none.
	attachTaps []*attachTap
}

// attachTap wraps a transport and counts the _anchor_attach requests
// handed to it; frames pass on unchanged.
type attachTap struct {
	ext.Transport
	n atomic.Uint64
}

func (t *attachTap) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	t.look(f)
	return t.Transport.Send(target, f)
}

func (t *attachTap) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	t.look(f)
	return t.Transport.SendOnLane(target, lane, f)
}

// Unwrap returns the wrapped transport (ext.TransportWrapper), so that the
// node reaches its ConnConfirmer: without it, every connection this
// engine accepts stays fenced at its dialer until the fence times out.
func (t *attachTap) Unwrap() ext.Transport { return t.Transport }

// RetainsOwners passes on what the wrapped transport says (ext.OwnerRetainer).
func (t *attachTap) RetainsOwners() bool {
	r, ok := t.Transport.(ext.OwnerRetainer)
	return ok && r.RetainsOwners()
}

func (t *attachTap) look(f ext.Frame) {
	if f.Type != ext.Message {
		return
	}
	if name, ok := handlerBytes(f.Header); ok && string(name) == wire.AnchorAttachHandler {
		t.n.Add(1)
	}
}

// attaches is the _anchor_attach requests the engines sent.
func (p *veloPlane) attaches() uint64 {
	var n uint64
	for _, t := range p.attachTaps {
		n += t.n.Load()
	}
	return n
}

// rpTicketed is a mux-zero-rtt request as it is dispatched: the anchor's
// handle and the ticket the frontend minted for it.
type rpTicketed struct {
	handle wire.AnchorHandle
	ticket streaming.StreamOpenTicket
}

func newVeloPlane(ctx context.Context, cfg ResponsePlaneConfig, host, engine streaming.MuxConfig, wantKey string) (*veloPlane, error) {
	p := &veloPlane{wantKey: wantKey, manual: !engine.Disabled && engine.Flush == streaming.FlushManual}
	start := func(mc streaming.MuxConfig) (*velo.Node, error) {
		tr, err := cfg.newTCP()
		if err != nil {
			return nil, err
		}
		return velo.New(ctx, velo.WithTransport(tr), velo.WithMux(mc))
	}
	for range cfg.AnchorHosts {
		n, err := start(host)
		if err != nil {
			p.close()
			return nil, err
		}
		p.hosts = append(p.hosts, n)
	}
	for range cfg.Engines {
		var n *velo.Node
		var err error
		if engine.Disabled {
			n, err = start(engine)
		} else {
			// The mux arms count the engines' attach requests.
			var tr ext.Transport
			if tr, err = cfg.newTCP(); err == nil {
				tap := &attachTap{Transport: tr}
				p.attachTaps = append(p.attachTaps, tap)
				n, err = velo.New(ctx, velo.WithTransport(tap), velo.WithMux(engine))
			}
		}
		if err != nil {
			p.close()
			return nil, err
		}
		p.engines = append(p.engines, n)
	}
	for _, h := range p.hosts {
		for _, e := range p.engines {
			if err := h.RegisterPeer(e.PeerInfo()); err != nil {
				p.close()
				return nil, err
			}
			if err := e.RegisterPeer(h.PeerInfo()); err != nil {
				p.close()
				return nil, err
			}
		}
	}
	return p, nil
}

func (p *veloPlane) open(ctx context.Context, i, h, e int, consume func(func() ([]byte, error)) error) (any, error) {
	a, err := streaming.CreateAnchor[[]byte](p.hosts[h].Streams)
	if err != nil {
		return nil, err
	}
	var req any = a.Handle()
	if p.zeroRTT {
		// Registration mints the ticket, as a serving frontend does
		// before it hands the request to an engine.
		tk, err := p.hosts[h].Streams.PrebindAnchor(a.Handle())
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("prebind: %w", err)
		}
		req = rpTicketed{handle: a.Handle(), ticket: tk}
	}
	go func() {
		defer a.Close()
		consume(func() ([]byte, error) { return a.NextBytes(ctx) })
	}()
	return req, nil
}

type veloStream struct{ s *streaming.Sender[[]byte] }

func (p *veloPlane) bind(ctx context.Context, e int, req any) (rpStream, error) {
	var s *streaming.Sender[[]byte]
	var err error
	if p.zeroRTT {
		t := req.(rpTicketed)
		s, err = streaming.OpenAnchorStream[[]byte](ctx, p.engines[e].Streams, t.handle, t.ticket)
	} else {
		s, err = streaming.AttachAnchor[[]byte](ctx, p.engines[e].Streams, req.(wire.AnchorHandle))
	}
	if err != nil {
		return nil, err
	}
	if got := s.NegotiatedTransport(); got != p.wantKey {
		s.Close()
		return nil, fmt.Errorf("negotiated %q, want %q", got, p.wantKey)
	}
	return veloStream{s: s}, nil
}

func (s veloStream) send(ctx context.Context, tok []byte) error { return s.s.SendBytes(ctx, tok) }

func (s veloStream) finish() error {
	err := s.s.Finalize()
	s.s.Close()
	return err
}

func (p *veloPlane) pass(e int) {
	if p.manual {
		p.engines[e].Streams.FlushBatch()
	}
}

func (p *veloPlane) wakes() rpWakes {
	var w rpWakes
	for _, n := range p.engines {
		st := streamx.MuxStats(n.Streams)
		w.engineBatcher += st.BatcherWakes
		w.engineBatches += st.BatchesSent
		w.creditExhausted += st.CreditExhausted
	}
	for _, n := range p.hosts {
		st := streamx.MuxStats(n.Streams)
		w.hostBatcher += st.BatcherWakes
		w.hostBatches += st.BatchesSent
		w.hostConsumer += streamx.ConsumerWakes(n.Streams)
	}
	return w
}

func (p *veloPlane) muxed() bool { return p.wantKey != wire.TCPStreamKey }

func (p *veloPlane) close() {
	for _, n := range append(slices.Clone(p.engines), p.hosts...) {
		shutdownWithin(n, 5*time.Second)
	}
}
