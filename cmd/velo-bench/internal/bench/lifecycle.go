package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamx"
	"github.com/velo-go/velo/streaming"
)

// StreamLifecycleModes are the arms of the stream-lifecycle harness: what
// the producer does after Finalize. Each rep runs them in rotated order.
//
//   - plain: move on after Finalize;
//   - retired: await Sender.Retired() taken after Finalize, the usual Go
//     form (a known outcome gives an already-closed channel);
//   - retired-early: take Retired() before the first send and await it
//     after Finalize (one channel made per stream);
//   - ack: await an active message the consumer sends after it read
//     Finalized. It needs a messenger between the ends, so it runs on
//     the per-stream path only (StreamLifecycleModesFor).
var StreamLifecycleModes = []string{"plain", "retired", "retired-early", "ack"}

// StreamLifecycleModesFor is every mode path can run: the same-worker path
// has one Manager and no messenger, so it has no ack.
func StreamLifecycleModesFor(path string) []string {
	if path == "same-worker" {
		return []string{"plain", "retired", "retired-early"}
	}
	return StreamLifecycleModes
}

// StreamLifecyclePaths are the stream paths the harness can run on.
var StreamLifecyclePaths = []string{"same-worker", "per-stream", "mux"}

// StreamLifecycleConfig sets the stream-lifecycle harness: whole stream
// lifecycles (create, attach, send, end) on one path.
type StreamLifecycleConfig struct {
	Path        string   // same-worker or per-stream
	Modes       []string // arms, from StreamLifecycleModes
	Streams     int      // measured lifecycles per arm and rep
	Concurrency int      // goroutines running lifecycles at once
	Items       int      // items of Payload bytes in each stream
	Payload     int
	Warmup      int // lifecycles per arm and rep before the measured run
	Reps        int
}

// Validate reports a config that cannot run.
func (c StreamLifecycleConfig) Validate() error {
	if !slices.Contains(StreamLifecyclePaths, c.Path) {
		return fmt.Errorf("unknown path %q (want %v)", c.Path, StreamLifecyclePaths)
	}
	if len(c.Modes) == 0 {
		return errors.New("no mode to run")
	}
	for _, m := range c.Modes {
		if !slices.Contains(StreamLifecycleModes, m) {
			return fmt.Errorf("unknown mode %q (want %v)", m, StreamLifecycleModes)
		}
		if !slices.Contains(StreamLifecycleModesFor(c.Path), m) {
			return fmt.Errorf("mode %s needs two velo nodes: run it with --path per-stream", m)
		}
	}
	if c.Streams < 1 || c.Concurrency < 1 || c.Items < 0 || c.Payload < 0 || c.Warmup < 0 || c.Reps < 1 {
		return errors.New("streams, concurrency and reps must be positive; items, payload and warmup not negative")
	}
	return nil
}

const streamLifecycleHarness = "stream-lifecycle"

// lifecycleEnds are the two managers of a run: the consumer's, which owns
// the anchors, and the producer's, which attaches. They are the same
// manager on the same-worker path, and two velo nodes' Streams on the
// per-stream path.
type lifecycleEnds struct {
	consumer, producer *streaming.Manager
	stop               func()

	// For mode ack, per-stream path only: the consumer's node sends
	// lifecycleAckHandler to the producer's, which wakes acks.
	consumerNode *velo.Node
	producerID   ext.InstanceID
	acks         *ackWaiters
}

// lifecycleAckHandler is the producer node's handler for the consumer's
// "I read Finalized" message.
const lifecycleAckHandler = "bench_lifecycle_ack"

// ackWaiters are the producers waiting for the consumer's ack, by the
// local id of the stream's anchor (unique on the consumer's node, and the
// producer has one consumer node).
type ackWaiters struct {
	mu   sync.Mutex
	wait map[uint64]chan struct{}
}

// expect registers a waiter for id; call it before the ack can be sent.
func (w *ackWaiters) expect(id uint64) <-chan struct{} {
	ch := make(chan struct{})
	w.mu.Lock()
	w.wait[id] = ch
	w.mu.Unlock()
	return ch
}

// pending is how many waiters are registered (none on a nil w).
func (w *ackWaiters) pending() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.wait)
}

func (w *ackWaiters) forget(id uint64) {
	w.mu.Lock()
	delete(w.wait, id)
	w.mu.Unlock()
}

// deliver wakes the waiter of the id in payload. It runs inline on the
// messenger's reader, so it only takes a lock and closes a channel.
func (w *ackWaiters) deliver(payload []byte) {
	if len(payload) != 8 {
		return
	}
	id := binary.BigEndian.Uint64(payload)
	w.mu.Lock()
	ch := w.wait[id]
	delete(w.wait, id)
	w.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func startLifecycleEnds(ctx context.Context, path string) (*lifecycleEnds, error) {
	if path == "same-worker" {
		m := streaming.NewManager(ext.NewInstanceID().WorkerID())
		return &lifecycleEnds{consumer: m, producer: m, stop: func() { m.Close() }}, nil
	}
	start := func() (*velo.Node, error) {
		tr, err := NewTransport("tcp")
		if err != nil {
			return nil, err
		}
		// The per-stream path turns the mux off; the mux path keeps it on.
		return velo.New(ctx, velo.WithTransport(tr), velo.WithMux(streaming.MuxConfig{Disabled: path != "mux"}))
	}
	a, err := start()
	if err != nil {
		return nil, err
	}
	b, err := start()
	if err != nil {
		shutdownWithin(a, 5*time.Second)
		return nil, err
	}
	stop := func() {
		shutdownWithin(a, 5*time.Second)
		shutdownWithin(b, 5*time.Second)
	}
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		stop()
		return nil, err
	}
	acks := &ackWaiters{wait: make(map[uint64]chan struct{})}
	if err := a.Register(velo.FireHandler(lifecycleAckHandler, func(c *velo.Context) { acks.deliver(c.Payload) }, velo.WithInline())); err != nil {
		stop()
		return nil, err
	}
	// The consumer's node learns the producer's from the attach
	// handshake too; registering it here keeps the first ack from
	// depending on that.
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		stop()
		return nil, err
	}
	return &lifecycleEnds{consumer: b.Streams, producer: a.Streams, stop: stop,
		consumerNode: b, producerID: a.InstanceID(), acks: acks}, nil
}

// streamLifecycle is one stream end to end: the consumer creates an
// anchor, the producer attaches, sends items, finalizes and, in mode
// retired*, awaits Retired(); then the consumer reads to the end. In mode
// ack the consumer reads to the end first and sends the producer's node an
// active message, which the producer awaits. It returns how long the
// producer held the stream after Finalize (the clock's own cost in mode
// plain). One goroutine plays both ends, so in mode ack the hold includes
// the consumer's reads.
func streamLifecycle(ctx context.Context, e *lifecycleEnds, mode string, items int, payload []byte) (time.Duration, error) {
	a, err := streaming.CreateAnchor[[]byte](e.consumer)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	s, err := streaming.AttachAnchor[[]byte](ctx, e.producer, a.Handle())
	if err != nil {
		return 0, err
	}
	defer s.Close()
	var retired <-chan struct{}
	var acked <-chan struct{}
	switch mode {
	case "retired-early":
		retired = s.Retired() // taken before the end: a channel of its own
	case "ack":
		id := a.Handle().LocalID()
		acked = e.acks.expect(id)
		defer e.acks.forget(id) // a lifecycle that fails leaves no waiter
	}
	for range items {
		if err := s.SendBytes(ctx, payload); err != nil {
			return 0, err
		}
	}
	if err := s.Finalize(); err != nil {
		return 0, err
	}
	// Every mode reads the clock here and after the wait, so the arms
	// differ by the wait alone.
	t := time.Now()
	if mode == "retired" {
		retired = s.Retired()
	}
	switch {
	case retired != nil:
		select {
		case <-retired:
			if out := s.Outcome(); out != streaming.RetireSent {
				return 0, fmt.Errorf("retired %v, want %v", out, streaming.RetireSent)
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	case acked != nil:
		if err := readToEnd(ctx, a, items); err != nil {
			return 0, err
		}
		if err := sendAck(ctx, e, a.Handle().LocalID()); err != nil {
			return 0, err
		}
		select {
		case <-acked:
			return time.Since(t), nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	held := time.Since(t)
	return held, readToEnd(ctx, a, items)
}

// sendAck is the consumer telling the producer's node that it read
// Finalized on the anchor with local id id.
func sendAck(ctx context.Context, e *lifecycleEnds, id uint64) error {
	return e.consumerNode.Send(ctx, e.producerID, lifecycleAckHandler, binary.BigEndian.AppendUint64(nil, id))
}

// readToEnd reads a's items up to Finalized and checks there were items.
func readToEnd(ctx context.Context, a *streaming.Anchor[[]byte], items int) error {
	for i := 0; ; i++ {
		_, err := a.NextBytes(ctx)
		if errors.Is(err, io.EOF) {
			if i != items {
				return fmt.Errorf("read %d items, want %d", i, items)
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// StreamLifecycle runs short streams on one path, each mode an arm. Both
// ends live in this process; on the per-stream path they are two velo
// nodes on loopback TCP, and each stream opens its own connection. Each
// arm and rep runs Warmup lifecycles, then Streams lifecycles from
// Concurrency goroutines, and reports lifecycles per second, latency
// percentiles of one lifecycle, process CPU (getrusage user+sys, GC
// included) per lifecycle, and how long the producer held the stream
// after Finalize. cpu_us_per_lifecycle_ratio and lifecycles_per_s_ratio
// are retired/plain and ack/plain, paired by rep.
func StreamLifecycle(cfg StreamLifecycleConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx := context.Background()
	e, err := startLifecycleEnds(ctx, cfg.Path)
	if err != nil {
		return err
	}
	defer e.stop()
	params := map[string]any{"path": cfg.Path, "streams": cfg.Streams, "concurrency": cfg.Concurrency,
		"items": cfg.Items, "procs": runtime.GOMAXPROCS(0)}
	payload := make([]byte, cfg.Payload)
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, mode := range rotated(cfg.Modes, rep) {
			if err := lifecycleArm(ctx, e, cfg, mode, payload, params, r); err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
		}
	}
	for _, mode := range []string{"retired", "retired-early", "ack"} {
		if slices.Contains(cfg.Modes, "plain") && slices.Contains(cfg.Modes, mode) {
			addPlainRatios(r, mode, params)
		}
	}
	return nil
}

// addPlainRatios adds mode/plain for CPU and rate, paired by rep.
func addPlainRatios(r *Report, mode string, params map[string]any) {
	for _, metric := range []string{"cpu_us_per_lifecycle", "lifecycles_per_s"} {
		num, _ := r.Find(streamLifecycleHarness, mode, metric, params)
		den, _ := r.Find(streamLifecycleHarness, "plain", metric, params)
		r.Ratio(streamLifecycleHarness, mode+"/plain", metric+"_ratio", num, den, params)
	}
}

func lifecycleArm(ctx context.Context, e *lifecycleEnds, cfg StreamLifecycleConfig, mode string, payload []byte, params map[string]any, r *Report) error {
	for range cfg.Warmup {
		if _, err := streamLifecycle(ctx, e, mode, cfg.Items, payload); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, cfg.Streams)
	held := make([]time.Duration, cfg.Streams)
	errs := make([]error, cfg.Concurrency)
	var next sync.Mutex
	n := 0
	take := func() int {
		next.Lock()
		defer next.Unlock()
		if n == cfg.Streams {
			return -1
		}
		n++
		return n - 1
	}
	runtime.GC()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j := take(); j >= 0; j = take() {
				t := time.Now()
				h, err := streamLifecycle(ctx, e, mode, cfg.Items, payload)
				if err != nil {
					errs[i] = err
					return
				}
				lat[j], held[j] = time.Since(t), h
			}
		}()
	}
	cpu0, t0 := processCPU(), time.Now()
	close(start)
	wg.Wait()
	wall, cpu := time.Since(t0), processCPU()-cpu0
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if k := streamx.ActiveAnchors(e.consumer); k != 0 {
		return fmt.Errorf("%d anchors left after the run", k)
	}
	if k := e.acks.pending(); k != 0 {
		return fmt.Errorf("%d producers still wait for an ack after the run", k)
	}
	k := float64(cfg.Streams)
	r.Add(streamLifecycleHarness, mode, "lifecycles_per_s", "per_s", k/wall.Seconds(), params)
	r.Add(streamLifecycleHarness, mode, "cpu_us_per_lifecycle", "us", float64(cpu.Nanoseconds())/k/1e3, params)
	addPercentiles(r, streamLifecycleHarness, mode, "lifecycle_", lat, params)
	addPercentiles(r, streamLifecycleHarness, mode, "held_after_finalize_", held, params)
	return nil
}

// addPercentiles adds the p50 and p99 of ds, in µs, as prefix+"p50_us" and
// prefix+"p99_us".
func addPercentiles(r *Report, harness, arm, prefix string, ds []time.Duration, params map[string]any) {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := float64(len(s))
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50_us", 0.5}, {"p99_us", 0.99}} {
		r.Add(harness, arm, prefix+p.name, "us", float64(s[int(p.q*(n-1))])/1e3, params)
	}
}
