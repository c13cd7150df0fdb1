package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/internal/streamx"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming"
)

// The batched-streaming harness (after the Rust reference's
// examples/examples/batched_streaming.rs) shows that the mux batches across streams and compares the
// flush policies. It is the response-plane shape at a small scale: anchor
// hosts own one response stream per request, and engines run continuous
// batching, each forward pass putting one token on every active request.
// Its figure is tokens per wire write on the engines' side.
//
// Unlike response-plane, the run is made repeatable on purpose: every
// anchor is created and every request queued before any engine starts, so
// each engine admits the same requests at the same pass on every run, and
// a request's token budget comes from its index (1 + 7i mod --tokens, as
// in that example) unless --uniform gives every request --tokens. What can
// still move between runs is only how the batcher was scheduled against
// the engine, which is what the flush policies differ in.
//
// How writes are counted. On the mux, every engine node's transport is
// wrapped by a tap that decodes each outgoing _stream_batch before it is
// handed on, so the harness knows each batch's records by type: items
// (tokens), terminals, heartbeats, OpenSlot, CloseSlot and the rest. That
// gives batches that carried a token, next to MuxStats.BatchesSent (every
// batch, the reference's count) and MuxStats.RecordsSent (records of every
// type). On the per-stream path the engines' velo metrics give
// velo_streaming_egress_flushes_total, one socket write each. The write
// system calls come from /proc/self/io and are process-wide: hosts and
// engines share the process, and Go runs goroutines on any thread, so the
// engines' own syscalls cannot be separated.

const batchedStreamingHarness = "batched-streaming"

// BatchedStreamingConfig sets the batched-streaming harness.
type BatchedStreamingConfig struct {
	AnchorHosts int
	Engines     int
	Requests    int
	MaxBatch    int // active requests per engine
	Tokens      int // longest response; see Uniform
	// Uniform gives every request Tokens tokens; otherwise request i has
	// 1 + (7i mod Tokens), the Rust example's budget.
	Uniform       bool
	PassDelay     time.Duration
	Flush         string // manual (FlushBatch once per pass) or auto; ignored with Legacy
	InitialCredit uint32 // mux credit window; 0 is velo's default
	Legacy        bool   // the per-stream path (MuxConfig.Disabled)
	Reps          int
	Timeout       time.Duration // bounds one rep
	// Log, when set, gets one line per rep with that rep's counts.
	Log io.Writer
}

// Validate reports a config that cannot run.
func (c BatchedStreamingConfig) Validate() error {
	if c.AnchorHosts < 1 || c.Engines < 1 || c.Requests < 1 || c.MaxBatch < 1 || c.Tokens < 1 || c.Reps < 1 {
		return errors.New("anchor hosts, engines, requests, max batch, tokens and reps must be positive")
	}
	if c.PassDelay < 0 {
		return errors.New("pass delay must not be negative")
	}
	if c.Flush != "manual" && c.Flush != "auto" {
		return fmt.Errorf("unknown flush policy %q (want manual or auto)", c.Flush)
	}
	return nil
}

// budget is the tokens of request i.
func (c BatchedStreamingConfig) budget(i int) int {
	if c.Uniform {
		return c.Tokens
	}
	return 1 + (7*i)%c.Tokens
}

// bsCounts is what one rep measured.
type bsCounts struct {
	tokens, passes     uint64 // sent by the engines
	batches, records   uint64 // MuxStats of the engines: every batch, records of every type
	tap                tapCounts
	flushes, frames    uint64 // per-stream path: egress flushes and frames, engines' metrics
	writeSyscalls      uint64 // process-wide
	wall               time.Duration
	cpu                time.Duration
	received, finished uint64 // at the hosts
}

// BatchedStreaming runs the harness and adds its figures to r.
func BatchedStreaming(cfg BatchedStreamingConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	arm, flush := "mux", cfg.Flush
	if cfg.Legacy {
		arm, flush = "per-stream", "none"
	}
	params := map[string]any{"anchor_hosts": cfg.AnchorHosts, "engines": cfg.Engines, "requests": cfg.Requests,
		"max_batch": cfg.MaxBatch, "tokens": cfg.Tokens, "uniform": cfg.Uniform,
		"pass_delay_ms": float64(cfg.PassDelay) / float64(time.Millisecond),
		"flush_policy":  flush, "initial_credit": cfg.InitialCredit, "procs": runtime.GOMAXPROCS(0)}
	for rep := 0; rep < cfg.Reps; rep++ {
		c, err := batchedStreamingRun(cfg)
		if err != nil {
			return fmt.Errorf("rep %d: %w", rep+1, err)
		}
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "rep %d: %s\n", rep+1, c.describe(cfg.Legacy))
		}
		add := func(metric, unit string, v float64) { r.Add(batchedStreamingHarness, arm, metric, unit, v, params) }
		tok := float64(c.tokens)
		add("tokens_count", "count", tok)
		add("forward_passes_count", "count", float64(c.passes))
		if cfg.Legacy {
			add("wire_writes_count", "count", float64(c.flushes))
			add("tokens_per_wire_write_ratio", "ratio", tok/float64(c.flushes))
		} else {
			add("wire_writes_count", "count", float64(c.batches))
			add("tokens_per_wire_write_ratio", "ratio", tok/float64(c.batches))
			add("data_batches_count", "count", float64(c.tap.dataBatches))
			add("tokens_per_data_batch_ratio", "ratio", tok/float64(c.tap.dataBatches))
			add("records_per_batch_ratio", "ratio", float64(c.records)/float64(c.batches))
		}
		if c.writeSyscalls > 0 {
			add("tokens_per_write_syscall_ratio", "ratio", tok/float64(c.writeSyscalls))
		}
		add("cpu_us_per_token", "us", float64(c.cpu.Nanoseconds())/tok/1e3)
		add("wall_ms", "ms", float64(c.wall)/float64(time.Millisecond))
	}
	return nil
}

func (c bsCounts) describe(legacy bool) string {
	if legacy {
		return fmt.Sprintf("%d tokens in %d passes; engines: %d egress flushes carrying %d frames; process: %d write syscalls; %v",
			c.tokens, c.passes, c.flushes, c.frames, c.writeSyscalls, c.wall.Round(time.Millisecond))
	}
	t := c.tap
	return fmt.Sprintf("%d tokens in %d passes; engines: %d batches (%d with a token), %d records "+
		"(tap: %d items, %d terminals, %d heartbeats, %d open, %d close, %d other); process: %d write syscalls; %v",
		c.tokens, c.passes, c.batches, t.dataBatches, c.records, t.items, t.terminals, t.heartbeats, t.opens, t.closes, t.other,
		c.writeSyscalls, c.wall.Round(time.Millisecond))
}

// check fails a rep whose counts do not account for every token.
func (c bsCounts) check(cfg BatchedStreamingConfig, want uint64) error {
	if c.tokens != want || c.received != want {
		return fmt.Errorf("engines sent %d tokens and hosts read %d, want %d", c.tokens, c.received, want)
	}
	if c.finished != uint64(cfg.Requests) {
		return fmt.Errorf("%d of %d requests finished", c.finished, cfg.Requests)
	}
	if cfg.Legacy {
		if c.frames < c.tokens {
			return fmt.Errorf("engines' egress wrote %d frames for %d tokens", c.frames, c.tokens)
		}
		if c.flushes == 0 {
			return errors.New("no egress flush counted on the engines")
		}
		return nil
	}
	t := c.tap
	if t.items != c.tokens {
		return fmt.Errorf("the tap saw %d item records for %d tokens", t.items, c.tokens)
	}
	if c.records < c.tokens || t.records != c.records {
		return fmt.Errorf("MuxStats counts %d records and the tap %d, for %d tokens", c.records, t.records, c.tokens)
	}
	if t.batches != c.batches {
		return fmt.Errorf("MuxStats counts %d batches and the tap %d", c.batches, t.batches)
	}
	if t.undecoded != 0 {
		return fmt.Errorf("the tap could not decode %d batches", t.undecoded)
	}
	return nil
}

// bsToken is 16 bytes: the request index and the token's position.
func bsToken(req, pos int) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(req))
	binary.BigEndian.PutUint64(b[8:], uint64(pos))
	return b
}

type bsRequest struct {
	idx    int
	budget int
	handle wire.AnchorHandle
}

// batchedStreamingRun is one rep on fresh nodes.
func batchedStreamingRun(cfg BatchedStreamingConfig) (bsCounts, error) {
	var c bsCounts
	ctx, cancel := context.WithTimeoutCause(context.Background(), cfg.Timeout, errors.New("rep timed out"))
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)

	mc := streaming.MuxConfig{InitialCredit: cfg.InitialCredit, Flush: streaming.FlushAuto}
	if cfg.Flush == "manual" {
		mc.Flush = streaming.FlushManual
	}
	wantKey := muxwire.TransportKey
	if cfg.Legacy {
		mc, wantKey = streaming.MuxConfig{Disabled: true}, wire.TCPStreamKey
	}
	var nodes []*velo.Node
	defer func() {
		for _, n := range nodes {
			shutdownWithin(n, 5*time.Second)
		}
	}()
	start := func(opts ...velo.Option) (*velo.Node, error) {
		n, err := velo.New(ctx, append(opts, velo.WithMux(mc))...)
		if err == nil {
			nodes = append(nodes, n)
		}
		return n, err
	}
	hosts := make([]*velo.Node, cfg.AnchorHosts)
	for h := range hosts {
		tr, err := NewTransport("tcp")
		if err != nil {
			return c, err
		}
		if hosts[h], err = start(velo.WithTransport(tr)); err != nil {
			return c, err
		}
	}
	engines := make([]*velo.Node, cfg.Engines)
	taps := make([]*batchTap, cfg.Engines)
	regs := make([]*prometheus.Registry, cfg.Engines)
	for e := range engines {
		tr, err := NewTransport("tcp")
		if err != nil {
			return c, err
		}
		taps[e] = &batchTap{tapped: tapped{tr}}
		regs[e] = prometheus.NewRegistry()
		met, err := metrics.Register(regs[e])
		if err != nil {
			return c, err
		}
		if engines[e], err = start(velo.WithTransport(taps[e]), velo.WithMetrics(met)); err != nil {
			return c, err
		}
	}
	for _, h := range hosts {
		for _, e := range engines {
			if err := h.RegisterPeer(e.PeerInfo()); err != nil {
				return c, err
			}
			if err := e.RegisterPeer(h.PeerInfo()); err != nil {
				return c, err
			}
		}
	}

	// Every anchor and every queued request exists before an engine runs.
	var want uint64
	var received, finished atomic.Uint64
	var errOnce sync.Once
	var firstErr error
	setErr := func(err error) {
		errOnce.Do(func() { firstErr = err })
		fail(err)
	}
	queues := make([]chan bsRequest, cfg.Engines)
	for e := range queues {
		queues[e] = make(chan bsRequest, cfg.Requests)
	}
	var consumers sync.WaitGroup
	for i := 0; i < cfg.Requests; i++ {
		budget := cfg.budget(i)
		want += uint64(budget)
		a, err := streaming.CreateAnchor[[]byte](hosts[i%cfg.AnchorHosts].Streams)
		if err != nil {
			return c, fmt.Errorf("request %d: create anchor: %w", i, err)
		}
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			defer a.Close()
			for pos := 0; ; pos++ {
				p, err := a.NextBytes(ctx)
				if errors.Is(err, io.EOF) {
					if pos != budget {
						setErr(fmt.Errorf("request %d: finalized after %d tokens, want %d", i, pos, budget))
						return
					}
					finished.Add(1)
					return
				}
				if err != nil {
					setErr(fmt.Errorf("request %d, token %d: %w", i, pos, err))
					return
				}
				if len(p) != 16 || binary.BigEndian.Uint64(p) != uint64(i) || binary.BigEndian.Uint64(p[8:]) != uint64(pos) {
					setErr(fmt.Errorf("request %d: token %x at position %d", i, p, pos))
					return
				}
				received.Add(1)
			}
		}()
		queues[i%cfg.Engines] <- bsRequest{idx: i, budget: budget, handle: a.Handle()}
	}
	for _, q := range queues {
		close(q)
	}

	runtime.GC()
	var tokens, passes atomic.Uint64
	writes0, cpu0, t0 := writeSyscalls(), processCPU(), time.Now()
	var wg sync.WaitGroup
	for e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, p, err := bsEngine(ctx, cfg, engines[e], queues[e], wantKey)
			tokens.Add(n)
			passes.Add(p)
			if err != nil {
				setErr(fmt.Errorf("engine %d: %w", e, err))
			}
		}()
	}
	wg.Wait()
	consumers.Wait()
	c.wall, c.cpu, c.writeSyscalls = time.Since(t0), processCPU()-cpu0, writeSyscalls()-writes0
	if firstErr != nil {
		return c, firstErr
	}
	if err := context.Cause(ctx); err != nil {
		return c, err
	}
	c.tokens, c.passes, c.received, c.finished = tokens.Load(), passes.Load(), received.Load(), finished.Load()
	// The batcher counts a batch in MuxStats after the transport took it
	// (and the per-stream pump a flush after its write), so a host can read
	// the last tokens before the count moves. Let the counts settle before
	// reading them: the tap's and MuxStats' agree, or every stream's frames
	// are counted.
	settle := time.Now().Add(2 * time.Second)
	for {
		c.batches, c.records, c.tap, c.flushes, c.frames = 0, 0, tapCounts{}, 0, 0
		for e, n := range engines {
			st := streamx.MuxStats(n.Streams)
			c.batches += st.BatchesSent
			c.records += st.RecordsSent
			c.tap.add(taps[e].snapshot())
			c.flushes += counterValue(regs[e], "velo_streaming_egress_flushes_total")
			c.frames += counterValue(regs[e], "velo_streaming_frames_written_total")
		}
		settled := c.batches == c.tap.batches && c.records == c.tap.records
		if cfg.Legacy {
			// Every stream wrote its tokens and one terminal.
			settled = c.frames >= c.tokens+uint64(cfg.Requests)
		}
		if settled || time.Now().After(settle) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return c, c.check(cfg, want)
}

// bsEngine is one engine's continuous batching: admit queued requests up
// to MaxBatch, one token on every active stream, finalize the streams that
// spent their budget, end the pass (FlushBatch under manual), wait
// PassDelay. The queue is full and closed before it starts.
func bsEngine(ctx context.Context, cfg BatchedStreamingConfig, n *velo.Node, queue <-chan bsRequest, wantKey string) (tokens, passes uint64, err error) {
	type active struct {
		s          *streaming.Sender[[]byte]
		idx        int
		pos, total int
	}
	batch := make([]active, 0, cfg.MaxBatch)
	defer func() {
		for _, a := range batch {
			a.s.Close()
		}
	}()
	manual := !cfg.Legacy && cfg.Flush == "manual"
	open := true
	for open || len(batch) > 0 {
		for open && len(batch) < cfg.MaxBatch {
			q, ok := <-queue
			if !ok {
				open = false
				break
			}
			s, err := streaming.AttachAnchor[[]byte](ctx, n.Streams, q.handle)
			if err != nil {
				return tokens, passes, fmt.Errorf("request %d: attach: %w", q.idx, err)
			}
			if got := s.NegotiatedTransport(); got != wantKey {
				s.Close()
				return tokens, passes, fmt.Errorf("request %d: negotiated %q, want %q", q.idx, got, wantKey)
			}
			batch = append(batch, active{s: s, idx: q.idx, total: q.budget})
		}
		if len(batch) == 0 {
			break
		}
		passes++
		for j := range batch {
			a := &batch[j]
			if err := a.s.SendBytes(ctx, bsToken(a.idx, a.pos)); err != nil {
				return tokens, passes, fmt.Errorf("request %d, token %d: %w", a.idx, a.pos, err)
			}
			a.pos++
			tokens++
		}
		kept := batch[:0]
		for _, a := range batch {
			if a.pos < a.total {
				kept = append(kept, a)
				continue
			}
			err := a.s.Finalize()
			a.s.Close()
			if err != nil {
				return tokens, passes, fmt.Errorf("request %d: finalize: %w", a.idx, err)
			}
		}
		clear(batch[len(kept):])
		batch = kept
		// After the finalizes, so that a terminal rides with its pass. A
		// Finalize wakes the batcher (a terminal is urgent): if that wake
		// runs before this call, the finalized streams go in a batch of
		// their own and the pass costs one write more (docs/mux.md).
		if manual {
			n.Streams.FlushBatch()
		}
		if cfg.PassDelay > 0 {
			time.Sleep(cfg.PassDelay)
		}
	}
	return tokens, passes, nil
}

// counterValue sums the samples of a counter family in reg; 0 if absent.
func counterValue(reg *prometheus.Registry, name string) uint64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue()
		}
	}
	return uint64(v + 0.5)
}

// tapCounts is what a batchTap saw: _stream_batch messages handed to the
// transport, and their records by type.
type tapCounts struct {
	batches, dataBatches, records               uint64
	items, terminals, heartbeats, opens, closes uint64
	other, undecoded                            uint64
}

func (t *tapCounts) add(o tapCounts) {
	t.batches += o.batches
	t.dataBatches += o.dataBatches
	t.records += o.records
	t.items += o.items
	t.terminals += o.terminals
	t.heartbeats += o.heartbeats
	t.opens += o.opens
	t.closes += o.closes
	t.other += o.other
	t.undecoded += o.undecoded
}

// batchTap wraps a transport and decodes every _stream_batch active
// message it is asked to send, before passing the frame on unchanged. It
// reads the frame synchronously, so it never holds the frame's memory.
type batchTap struct {
	tapped
	mu sync.Mutex
	c  tapCounts
}

func (t *batchTap) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	t.look(f)
	return t.Transport.Send(target, f)
}

func (t *batchTap) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	t.look(f)
	return t.Transport.SendOnLane(target, lane, f)
}

func (t *batchTap) snapshot() tapCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.c
}

// itemPrefix starts the stream frame of a byte item (see wire.ByteItemHeaderLen).
const itemPrefix = "\x81\xa4Item"

func (t *batchTap) look(f ext.Frame) {
	if f.Type != ext.Message {
		return
	}
	name, ok := activeMessageHandler(f.Header)
	if !ok {
		return
	}
	if _, ok := muxwire.LaneOfHandler(name); !ok {
		return
	}
	var c tapCounts
	c.batches = 1
	b, err := muxwire.Decode(f.Payload)
	if err != nil {
		c.undecoded = 1
	} else {
		rd := b.Records()
		for rec, ok := rd.Next(); ok; rec, ok = rd.Next() {
			c.records++
			switch {
			case rec.Type == muxwire.Data && bytes.HasPrefix(rec.Body, []byte(itemPrefix)):
				c.items++
			case rec.Type == muxwire.Data && string(rec.Body) == wire.HeartbeatFrame:
				c.heartbeats++
			case rec.Type == muxwire.Data:
				c.terminals++ // Finalized, Detached, Dropped or a sender error
			case rec.Type == muxwire.SlotHeartbeat:
				c.heartbeats++
			case rec.Type == muxwire.OpenSlot:
				c.opens++
			case rec.Type == muxwire.CloseSlot:
				c.closes++
			default:
				c.other++
			}
		}
		if c.items > 0 {
			c.dataBatches = 1
		}
	}
	t.mu.Lock()
	t.c.add(c)
	t.mu.Unlock()
}

// activeMessageHandler reads the handler name of an active-message request
// header: [u8 schema=1][u8 response type][u128 response id][u16 LE name
// length][name]... (DESIGN.md §5).
func activeMessageHandler(h []byte) (string, bool) {
	name, ok := handlerBytes(h)
	return string(name), ok
}

// handlerBytes is the handler name in h, aliasing it; a tap that only
// compares names uses it so that it allocates nothing per frame.
func handlerBytes(h []byte) ([]byte, bool) {
	const nameAt = 20
	if len(h) < nameAt || h[0] != 1 {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint16(h[18:]))
	if len(h) < nameAt+n {
		return nil, false
	}
	return h[nameAt : nameAt+n], true
}
