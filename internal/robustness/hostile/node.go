package hostile

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/velo-go/velo/internal/streamx"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/internal/msgrx"
	velometrics "github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// RoleEnv makes a binary run as a node process (RunChild) instead of what
// it normally does. The case sets it when it starts one.
const RoleEnv = "VELO_HOSTILE_ROLE"

// IsChild says whether this process was started as a node process.
func IsChild() bool { return os.Getenv(RoleEnv) != "" }

// RunChild runs a node process until its stdin closes, then exits.
//
// With VELO_HOSTILE_CPUPROFILE set, the node writes a CPU profile of its
// whole life to that path plus its pid.
func RunChild() {
	if path := os.Getenv("VELO_HOSTILE_CPUPROFILE"); path != "" {
		if f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid())); err == nil {
			pprof.StartCPUProfile(f)
			defer f.Close()
		}
	}
	n, err := newNode()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile node:", err)
		os.Exit(2)
	}
	n.serve(os.Stdin)
	pprof.StopCPUProfile()
	os.Exit(0)
}

// node is one node process: a velo node and the state of the commands.
type node struct {
	v     *velo.Node
	reg   *prometheus.Registry
	start time.Time

	outMu sync.Mutex
	out   *bufio.Writer

	mu        sync.Mutex
	consumers map[string][]*consumer
	producers map[string][]*producer
	events    map[events.Handle]*events.Event
	waits     map[events.Handle]*wait
	fetches   map[rendezvous.DataHandle]chan rvFetchAnswer
}

func newNode() (*node, error) {
	reg := prometheus.NewRegistry()
	vm, err := velometrics.Register(reg)
	if err != nil {
		return nil, err
	}
	tr, err := tcp.New()
	if err != nil {
		return nil, err
	}
	// Warnings go to stderr, which the case keeps for a post-mortem; a
	// flood of them is itself a cost the figures should show.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	v, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithMetrics(vm), velo.WithLogger(log))
	if err != nil {
		return nil, err
	}
	n := &node{
		v: v, reg: reg, start: time.Now(), out: bufio.NewWriter(os.Stdout),
		consumers: map[string][]*consumer{}, producers: map[string][]*producer{},
		events: map[events.Handle]*events.Event{}, waits: map[events.Handle]*wait{},
		fetches: map[rendezvous.DataHandle]chan rvFetchAnswer{},
	}
	// A user handler, so that a request can reach this node past the
	// handshake (the hostile owner's staged request does).
	if err := v.Register(velo.UnaryHandler("work", func(*velo.Context) ([]byte, error) {
		return []byte("done"), nil
	})); err != nil {
		return nil, err
	}
	return n, nil
}

// serve reads commands until in closes.
func (n *node) serve(in io.Reader) {
	info := n.v.PeerInfo()
	n.write(reply{ID: 0, Data: mustJSON(hello{PeerInfo: info, WorkerID: uint64(n.v.WorkerID()), PID: os.Getpid(), Race: RaceEnabled})})
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, "hostile node: bad command:", err)
			continue
		}
		go func() {
			data, err := n.do(c)
			r := reply{ID: c.ID}
			if err != nil {
				r.Err = err.Error()
			} else if data != nil {
				r.Data = mustJSON(data)
			}
			n.write(r)
		}()
	}
}

func (n *node) write(r reply) {
	b := mustJSON(r)
	n.outMu.Lock()
	defer n.outMu.Unlock()
	n.out.Write(b)
	n.out.WriteByte('\n')
	n.out.Flush()
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (n *node) do(c command) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	switch c.Op {
	case "register":
		var a registerArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, err
		}
		if err := n.v.RegisterPeer(a.Peer); err != nil {
			return nil, err
		}
		return nil, msgrx.Handshake(n.v.Messenger(), ctx, a.Peer.InstanceID)
	case "consume":
		var a consumeArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, err
		}
		return n.consume(a)
	case "produce":
		var a produceArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, err
		}
		return n.produce(ctx, a)
	case "pause", "resume", "finish", "results", "progress", "close":
		var a setArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, err
		}
		return n.setOp(c.Op, a)
	case "stats":
		var a statsArgs
		if len(c.Args) > 0 {
			if err := json.Unmarshal(c.Args, &a); err != nil {
				return nil, err
			}
		}
		return n.stats(a)
	case "event_new":
		ev, err := n.v.Events.NewEvent()
		if err != nil {
			return nil, err
		}
		n.mu.Lock()
		n.events[ev.Handle()] = ev
		n.mu.Unlock()
		return eventArgs{Handle: ev.Handle()}, nil
	case "event_trigger", "event_wait", "event_status", "event_result":
		var a eventArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, err
		}
		return n.eventOp(ctx, c.Op, a.Handle)
	case "rv_register":
		var a rvRegisterArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, err
		}
		data := make([]byte, a.Size)
		rand.Read(data)
		sum := sha256.Sum256(data)
		return rvAnswer{Handle: n.v.Rendezvous.RegisterData(data), Sum: hex.EncodeToString(sum[:])}, nil
	case "rv_get", "rv_slow_start", "rv_slow_result":
		var a rvFetchArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, err
		}
		return n.rvOp(ctx, c.Op, a)
	}
	return nil, fmt.Errorf("unknown op %q", c.Op)
}

// ---- streams ----

// itemHeader is the bytes of an item that carry its number.
const itemHeader = 8

// consumer reads one anchor and checks that items come numbered 0, 1, 2…
type consumer struct {
	a        *streaming.Anchor[[]byte]
	gate     *atomic.Pointer[chan struct{}] // the set's pause: nil when reading
	received atomic.Int64
	inOrder  atomic.Bool
	end      atomic.Pointer[string]
	done     chan struct{}
}

func (n *node) consume(a consumeArgs) (any, error) {
	gate := new(atomic.Pointer[chan struct{}])
	n.mu.Lock()
	if old := n.consumers[a.Set]; len(old) > 0 {
		gate = old[0].gate
	}
	n.mu.Unlock()
	if a.Paused {
		ch := make(chan struct{})
		gate.CompareAndSwap(nil, &ch)
	}
	var ans consumeAnswer
	for range a.N {
		an, err := streaming.CreateAnchor[[]byte](n.v.Streams)
		if err != nil {
			return nil, err
		}
		c := &consumer{a: an, gate: gate, done: make(chan struct{})}
		c.inOrder.Store(true)
		n.mu.Lock()
		n.consumers[a.Set] = append(n.consumers[a.Set], c)
		n.mu.Unlock()
		go c.run()
		ans.Handles = append(ans.Handles, an.Handle())
	}
	return ans, nil
}

func (c *consumer) run() {
	defer close(c.done)
	ctx := context.Background()
	for want := uint64(0); ; want++ {
		if g := c.gate.Load(); g != nil {
			<-*g
		}
		p, err := c.a.NextBytes(ctx)
		if err != nil {
			s := "eof"
			if !errors.Is(err, io.EOF) {
				s = err.Error()
			}
			c.end.Store(&s)
			return
		}
		if len(p) < itemHeader || binary.BigEndian.Uint64(p) != want {
			c.inOrder.Store(false)
		}
		c.received.Add(1)
	}
}

// producer sends numbered items on one stream.
type producer struct {
	s    *streaming.Sender[[]byte]
	stop chan struct{}
	done chan struct{}
	sent int
	err  error
}

func (n *node) produce(ctx context.Context, a produceArgs) (any, error) {
	var ans produceAnswer
	var ps []*producer
	for _, h := range a.Handles {
		s, err := streaming.AttachAnchor[[]byte](ctx, n.v.Streams, h)
		if err != nil {
			for _, p := range ps {
				p.s.Close()
			}
			return nil, fmt.Errorf("attach %v: %w", h, err)
		}
		ps = append(ps, &producer{s: s, stop: make(chan struct{}), done: make(chan struct{})})
		ans.Transports = append(ans.Transports, s.NegotiatedTransport())
	}
	n.mu.Lock()
	n.producers[a.Set] = append(n.producers[a.Set], ps...)
	n.mu.Unlock()
	for _, p := range ps {
		go p.run(a.PaceUS, max(a.Payload, itemHeader), a.Count)
	}
	return ans, nil
}

func (p *producer) run(paceUS, size, count int) {
	defer close(p.done)
	ctx := context.Background()
	var tick <-chan time.Time
	if paceUS > 0 {
		t := time.NewTicker(time.Duration(paceUS) * time.Microsecond)
		defer t.Stop()
		tick = t.C
	}
	item := make([]byte, size)
	for i := 0; count == 0 || i < count; i++ {
		if tick != nil {
			select {
			case <-tick:
			case <-p.stop:
				p.finish()
				return
			}
		} else {
			select {
			case <-p.stop:
				p.finish()
				return
			default:
			}
		}
		binary.BigEndian.PutUint64(item, uint64(i))
		if err := p.s.SendBytes(ctx, item); err != nil {
			p.err = err
			p.s.Close()
			return
		}
		p.sent++
	}
	p.finish()
}

func (p *producer) finish() {
	if err := p.s.Finalize(); err != nil && p.err == nil {
		p.err = fmt.Errorf("finalize: %w", err)
	}
}

// setOp runs a command on every stream of a set.
func (n *node) setOp(op string, a setArgs) (any, error) {
	n.mu.Lock()
	cs, ps := n.consumers[a.Set], n.producers[a.Set]
	n.mu.Unlock()
	timeout := time.Duration(a.TimeoutMS) * time.Millisecond
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	switch op {
	case "pause":
		if len(cs) > 0 {
			ch := make(chan struct{})
			cs[0].gate.CompareAndSwap(nil, &ch)
		}
		return nil, nil
	case "resume":
		if len(cs) > 0 {
			if g := cs[0].gate.Swap(nil); g != nil {
				close(*g)
			}
		}
		return nil, nil
	case "close":
		for _, c := range cs {
			c.a.Close()
		}
		return nil, nil
	case "finish":
		for _, p := range ps {
			select {
			case <-p.stop:
			default:
				close(p.stop)
			}
		}
		// A context, not time.After: its Done stays closed for every
		// stream after the first that waited it out.
		wctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		out := make([]sentResult, 0, len(ps))
		for _, p := range ps {
			r := sentResult{Handle: p.s.Handle()}
			select {
			case <-p.done:
				r.Sent = p.sent
				if p.err != nil {
					r.Err = p.err.Error()
				}
			case <-wctx.Done():
				r.Sent, r.Err = -1, "the producer did not stop in time"
			}
			out = append(out, r)
		}
		return out, nil
	case "progress":
		var pa progressAnswer
		pa.MinReceived = -1
		for _, c := range cs {
			r := int(c.received.Load())
			if pa.MinReceived < 0 || r < pa.MinReceived {
				pa.MinReceived = r
			}
			if c.end.Load() != nil {
				pa.Ended++
			}
		}
		return pa, nil
	case "results":
		wctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		out := make([]recvResult, 0, len(cs))
		for _, c := range cs {
			select {
			case <-c.done:
			case <-wctx.Done():
			}
		}
		for _, c := range cs {
			r := recvResult{Handle: c.a.Handle(), Received: int(c.received.Load()), InOrder: c.inOrder.Load(), End: "pending"}
			if e := c.end.Load(); e != nil {
				r.End = *e
			}
			out = append(out, r)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

// ---- measurement ----

func (n *node) stats(a statsArgs) (any, error) {
	var s stats
	clock := func() {
		s.WallNS = int64(time.Since(n.start))
		s.CPUNS = cpuTime()
	}
	if !a.Start {
		clock()
	}
	if a.GC {
		if a.Start {
			// A collection leaves work behind (the scavenger returns
			// memory to the OS after it): do that here too, not in the
			// window that starts now.
			debug.FreeOSMemory()
		} else {
			runtime.GC()
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.HeapLive, s.HeapInuse = ms.HeapAlloc, ms.HeapInuse
	s.Goroutines = runtime.NumGoroutine()
	if a.Counters {
		s.Counters = n.counters()
	}
	if a.Start {
		clock()
	}
	return s, nil
}

// cpuTime is the CPU this process has spent, user and system, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// counters flattens every counter of the node's registry to
// name{label="value",…}, and adds the counts the packages export outside
// Prometheus under "stats:" names.
func (n *node) counters() map[string]float64 {
	out := map[string]float64{}
	mfs, err := n.reg.Gather()
	if err == nil {
		for _, mf := range mfs {
			if mf.GetType() != dto.MetricType_COUNTER {
				continue
			}
			for _, m := range mf.GetMetric() {
				out[seriesName(mf.GetName(), m.GetLabel())] = m.GetCounter().GetValue()
			}
		}
	}
	ms := streamx.MuxStats(n.v.Streams)
	out["stats:mux.ProtocolErrors"] = float64(ms.ProtocolErrors)
	out["stats:mux.EpochDeaths"] = float64(ms.EpochDeaths)
	out["stats:mux.WatchdogFirings"] = float64(ms.WatchdogFirings)
	out["stats:mux.CreditExhausted"] = float64(ms.CreditExhausted)
	out["stats:mux.BatchesReceived"] = float64(ms.BatchesReceived)
	out["stats:mux.BatchesSent"] = float64(ms.BatchesSent)
	out["stats:messenger.UnmatchedReplies"] = float64(msgrx.UnmatchedReplies(n.v.Messenger()))
	out["stats:streaming.WatchdogFirings"] = float64(streamx.WatchdogFirings(n.v.Streams))
	return out
}

func seriesName(name string, labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return name
	}
	b := []byte(name)
	b = append(b, '{')
	for i, l := range labels {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%s=%q", l.GetName(), l.GetValue())
	}
	return string(append(b, '}'))
}

// ---- events ----

// wait is one remote Wait this node runs for the case.
type wait struct {
	done chan struct{}
	err  error
}

func (n *node) eventOp(ctx context.Context, op string, h events.Handle) (any, error) {
	switch op {
	case "event_trigger":
		n.mu.Lock()
		ev := n.events[h]
		n.mu.Unlock()
		if ev == nil {
			return nil, fmt.Errorf("no event %v here", h)
		}
		return nil, ev.Trigger()
	case "event_wait":
		before := n.v.Events.Subscriptions()
		w := &wait{done: make(chan struct{})}
		n.mu.Lock()
		n.waits[h] = w
		n.mu.Unlock()
		go func() {
			w.err = n.v.Events.Wait(context.Background(), h)
			close(w.done)
		}()
		// Answer once the owner has been asked: a forged trigger before
		// the subscription is open would prove nothing.
		for n.v.Events.Subscriptions() == before {
			select {
			case <-w.done:
				return nil, fmt.Errorf("the wait ended before it subscribed: %v", w.err)
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		return nil, nil
	case "event_status", "event_result":
		n.mu.Lock()
		w := n.waits[h]
		n.mu.Unlock()
		if w == nil {
			return nil, fmt.Errorf("no wait on %v here", h)
		}
		if op == "event_result" {
			select {
			case <-w.done:
			case <-time.After(10 * time.Second):
			}
		}
		select {
		case <-w.done:
			st := eventStatus{Done: true}
			if w.err != nil {
				st.Err = w.err.Error()
			}
			return st, nil
		default:
			return eventStatus{}, nil
		}
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

// ---- rendezvous ----

func (n *node) rvOp(ctx context.Context, op string, a rvFetchArgs) (any, error) {
	switch op {
	case "rv_get":
		b, lease, err := n.v.Rendezvous.Get(ctx, a.Handle)
		if err != nil {
			return rvFetchAnswer{Err: err.Error()}, nil
		}
		n.v.Rendezvous.Release(ctx, a.Handle, lease)
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != a.Sum {
			return rvFetchAnswer{Err: "the payload fetched is not the payload staged"}, nil
		}
		return rvFetchAnswer{OK: true}, nil
	case "rv_slow_start":
		started := make(chan error, 1)
		res := make(chan rvFetchAnswer, 1)
		n.mu.Lock()
		n.fetches[a.Handle] = res
		n.mu.Unlock()
		go func() { res <- n.slowFetch(a, started) }()
		select {
		case err := <-started:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case "rv_slow_result":
		n.mu.Lock()
		res := n.fetches[a.Handle]
		n.mu.Unlock()
		if res == nil {
			return nil, errors.New("no slow fetch of that handle")
		}
		select {
		case r := <-res:
			return r, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

// slowFetch is a legit consumer that pulls a staged payload one chunk at a
// time, a.GapMS apart, so that its transfer is in progress while the case
// attacks it. It speaks the rendezvous protocol by hand (Get would pull
// the whole payload at once).
func (n *node) slowFetch(a rvFetchArgs, started chan<- error) rvFetchAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := n.v.Messenger()
	owner, ok := msgrx.InstanceOf(m, a.Handle.Owner())
	if !ok {
		started <- errors.New("the owner is not a known peer")
		return rvFetchAnswer{Err: "unknown owner"}
	}
	raw, err := m.Unary(ctx, owner, rendezvous.HandlerAcquire, mustJSON(map[string]any{"handle": a.Handle}))
	if err != nil {
		started <- err
		return rvFetchAnswer{Err: err.Error()}
	}
	var ans struct {
		Ready *struct {
			LeaseID    uint64 `json:"lease_id"`
			TransferID uint64 `json:"transfer_id"`
			TotalLen   uint64 `json:"total_len"`
			ChunkCount uint32 `json:"chunk_count"`
		}
	}
	if err := json.Unmarshal(raw, &ans); err != nil || ans.Ready == nil {
		started <- fmt.Errorf("acquire answer %q: %v", raw, err)
		return rvFetchAnswer{Err: "bad acquire answer"}
	}
	started <- nil
	rd := ans.Ready
	h := sha256.New()
	for i := range rd.ChunkCount {
		if i > 0 && a.GapMS > 0 {
			time.Sleep(time.Duration(a.GapMS) * time.Millisecond) // pacing, not a wait for a condition
		}
		b, err := m.Unary(ctx, owner, rendezvous.HandlerPull, mustJSON(map[string]any{"transfer_id": rd.TransferID, "chunk_index": i}))
		if err != nil {
			return rvFetchAnswer{Err: fmt.Sprintf("pull chunk %d: %v", i, err), Chunks: int(i)}
		}
		h.Write(b)
	}
	msgrx.Post(m, owner, rendezvous.HandlerRelease, mustJSON(map[string]any{"handle": a.Handle, "lease_id": rd.LeaseID}))
	if hex.EncodeToString(h.Sum(nil)) != a.Sum {
		return rvFetchAnswer{Err: "the payload pulled is not the payload staged", Chunks: int(rd.ChunkCount)}
	}
	return rvFetchAnswer{OK: true, Chunks: int(rd.ChunkCount)}
}
