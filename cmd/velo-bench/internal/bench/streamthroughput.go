package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/quic"
	"github.com/velo-go/velo/transport/tcp"
)

// StreamThroughputConfig sets the stream mode of the throughput harness:
// bulk byte items over the messenger mux, one TCP transport per node built
// with a given number of lanes.
type StreamThroughputConfig struct {
	// Transport is "tcp" (the default) or "quic": both nodes run one
	// transport of that kind.
	Transport string
	Lanes     []int // one arm per entry: both nodes' transports get WithLanes(n)
	Streams   []int // concurrent streams, producer node to consumer node
	ItemBytes int
	Duration  time.Duration // how long the producers send in one run
	Reps      int
	// Timeout bounds one run beyond Duration (default one minute).
	Timeout time.Duration
	// Log, when set, gets one line per run with its per-lane bytes.
	Log io.Writer
}

// Validate reports a config that cannot run.
func (c StreamThroughputConfig) Validate() error {
	if len(c.Lanes) == 0 || len(c.Streams) == 0 {
		return errors.New("stream mode needs at least one lane count and one stream count")
	}
	for _, l := range c.Lanes {
		if l < 1 || l > muxwire.Lanes {
			return fmt.Errorf("lanes %d out of range 1..%d", l, muxwire.Lanes)
		}
	}
	for _, s := range c.Streams {
		if s < 1 {
			return fmt.Errorf("stream count %d must be positive", s)
		}
	}
	if c.ItemBytes < 1 || c.Duration <= 0 || c.Reps < 1 {
		return errors.New("item bytes, duration and reps must be positive")
	}
	return nil
}

// laneArm names the arm of a lane count.
func laneArm(lanes int) string { return fmt.Sprintf("lanes=%d", lanes) }

// StreamThroughput runs every (lanes, streams) pair per rep, the lane arms
// of one stream count back to back in an order rotated per rep, and adds
// items/s, MiB/s and the lanes that carried data to r, then the ratio of
// every lane count to the first one (lanes=N / lanes=first) per rep.
//
// Which lane a stream uses is decided inside the mux, out of sight of this
// package, so the producer's transport is wrapped in a tap (laneTap) that
// counts the mux batch bytes of each lane, both as the mux labels them and
// as the transport carries them. A run with n lanes fails if fewer than
// min(n, streams) lanes carried data by the mux's labels; the TCP figure
// is reported, not enforced, so that the harness can measure a mux that
// labels lanes but sends them all on one connection.
func StreamThroughput(cfg StreamThroughputConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	params := func(streams int) map[string]any {
		return map[string]any{"mode": "stream", "transport": cmp.Or(cfg.Transport, "tcp"), "streams": streams,
			"item_bytes": cfg.ItemBytes, "duration_s": cfg.Duration.Seconds(), "procs": runtime.GOMAXPROCS(0)}
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, streams := range cfg.Streams {
			for _, lanes := range rotated(cfg.Lanes, rep) {
				res, err := streamThroughputRun(cfg, lanes, streams)
				if err != nil {
					return fmt.Errorf("stream lanes=%d streams=%d rep %d: %w", lanes, streams, rep+1, err)
				}
				p := params(streams)
				arm := laneArm(lanes)
				ips := float64(res.items) / res.elapsed.Seconds()
				r.Add("throughput", arm, "items_per_s", "per_s", ips, p)
				r.Add("throughput", arm, "mib_per_s", "mib_per_s", ips*float64(cfg.ItemBytes)/(1<<20), p)
				r.Add("throughput", arm, "mux_lanes_used_count", "count", float64(lanesUsed(res.handlerBytes)), p)
				r.Add("throughput", arm, "tcp_lanes_used_count", "count", float64(lanesUsed(res.wireBytes)), p)
				if share := minLaneShare(res.handlerBytes, lanes); share >= 0 {
					r.Add("throughput", arm, "mux_min_lane_share_ratio", "ratio", share, p)
				}
				if share := minLaneShare(res.wireBytes, lanes); share >= 0 {
					r.Add("throughput", arm, "tcp_min_lane_share_ratio", "ratio", share, p)
				}
				if cfg.Log != nil {
					fmt.Fprintf(cfg.Log, "rep %d lanes=%d streams=%d: %.0f items/s; mux batch bytes by handler lane %v, by TCP lane %v\n",
						rep+1, lanes, streams, ips, res.handlerBytes[:lanes], res.wireBytes[:lanes])
				}
			}
		}
	}
	base := cfg.Lanes[0]
	for _, streams := range cfg.Streams {
		p := params(streams)
		den, _ := r.Find("throughput", laneArm(base), "mib_per_s", p)
		for _, lanes := range cfg.Lanes[1:] {
			num, _ := r.Find("throughput", laneArm(lanes), "mib_per_s", p)
			r.Ratio("throughput", laneArm(lanes)+"/"+laneArm(base), "mib_per_s_ratio", num, den, p)
		}
	}
	return nil
}

// streamResult is one run: items the consumers read, the time from the
// producers' start to the last consumer seeing the end of its stream, and
// the mux batch bytes the producer's transport was given on each lane.
type streamResult struct {
	items   uint64
	elapsed time.Duration
	// Mux batch bytes per lane: as the handler names it, and as the
	// transport carried it (see laneTap).
	handlerBytes, wireBytes [muxwire.Lanes]uint64
}

// lanesUsed counts the lanes that carried any bytes.
func lanesUsed(bytes [muxwire.Lanes]uint64) int {
	n := 0
	for _, b := range bytes {
		if b > 0 {
			n++
		}
	}
	return n
}

// minLaneShare is the least-loaded lane's bytes over the mean of the first
// lanes lanes (1 is an even spread); -1 with no bytes.
func minLaneShare(bytes [muxwire.Lanes]uint64, lanes int) float64 {
	var sum, least uint64
	for l := 0; l < lanes; l++ {
		b := bytes[l]
		sum += b
		if l == 0 || b < least {
			least = b
		}
	}
	if sum == 0 {
		return -1
	}
	return float64(least) * float64(lanes) / float64(sum)
}

// laneTap counts the bytes of mux batches the producer's transport is
// given, two ways: by the lane the batch's handler name (_stream_batch.N)
// says, which is the mux's own placement, and by the transport lane it is
// sent on (Send is lane 0), which is the TCP connection that carries it.
// The two agree when the mux puts each lane's batches on its own
// connection.
type laneTap struct {
	tapped
	handler, wire [muxwire.Lanes]atomic.Uint64
}

func (t *laneTap) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	t.look(0, f)
	return t.Transport.Send(target, f)
}

func (t *laneTap) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	t.look(lane, f)
	return t.Transport.SendOnLane(target, lane, f)
}

func (t *laneTap) look(lane int, f ext.Frame) {
	if f.Type != ext.Message {
		return
	}
	name, ok := activeMessageHandler(f.Header)
	if !ok {
		return
	}
	hl, ok := muxwire.LaneOfHandler(name)
	if !ok {
		return
	}
	n := uint64(len(f.Payload))
	t.handler[hl].Add(n)
	if lane >= 0 && lane < muxwire.Lanes {
		t.wire[lane].Add(n)
	}
}

func (t *laneTap) snapshot() (handler, wire [muxwire.Lanes]uint64) {
	for l := range handler {
		handler[l], wire[l] = t.handler[l].Load(), t.wire[l].Load()
	}
	return handler, wire
}

// streamThroughputRun starts two fresh nodes with lanes lanes each, opens
// streams streams from the producer to anchors on the consumer, and has
// every producer send items as fast as credit lets it for cfg.Duration,
// then finalize. Every consumer reads to the end.
func streamThroughputRun(cfg StreamThroughputConfig, lanes, streams int) (streamResult, error) {
	var res streamResult
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), cfg.Duration+timeout, errors.New("run timed out"))
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)

	newTCP := func() (ext.Transport, error) {
		if cfg.Transport == "quic" {
			return quic.New(quic.WithLanes(lanes))
		}
		return tcp.New(append(tcpBufferOption(), tcp.WithLanes(lanes))...)
	}
	var nodes []*velo.Node
	defer func() {
		for _, n := range nodes {
			shutdownWithin(n, 5*time.Second)
		}
	}()
	ptr, err := newTCP()
	if err != nil {
		return res, err
	}
	tap := &laneTap{tapped: tapped{ptr}}
	producer, err := velo.New(ctx, velo.WithTransport(tap), velo.WithMux(streaming.MuxConfig{}))
	if err != nil {
		return res, err
	}
	nodes = append(nodes, producer)
	ctr, err := newTCP()
	if err != nil {
		return res, err
	}
	consumer, err := velo.New(ctx, velo.WithTransport(ctr), velo.WithMux(streaming.MuxConfig{}))
	if err != nil {
		return res, err
	}
	nodes = append(nodes, consumer)
	if err := producer.RegisterPeer(consumer.PeerInfo()); err != nil {
		return res, err
	}
	if err := consumer.RegisterPeer(producer.PeerInfo()); err != nil {
		return res, err
	}

	var errOnce sync.Once
	var firstErr error
	setErr := func(err error) {
		errOnce.Do(func() { firstErr = err })
		fail(err)
	}
	// Every stream is open before the clock starts.
	anchors := make([]*streaming.Anchor[[]byte], streams)
	senders := make([]*streaming.Sender[[]byte], streams)
	defer func() {
		for _, s := range senders {
			if s != nil {
				s.Close()
			}
		}
		for _, a := range anchors {
			if a != nil {
				a.Close()
			}
		}
	}()
	for i := range anchors {
		if anchors[i], err = streaming.CreateAnchor[[]byte](consumer.Streams); err != nil {
			return res, fmt.Errorf("stream %d: create anchor: %w", i, err)
		}
		if senders[i], err = streaming.AttachAnchor[[]byte](ctx, producer.Streams, anchors[i].Handle()); err != nil {
			return res, fmt.Errorf("stream %d: attach: %w", i, err)
		}
		if got := senders[i].NegotiatedTransport(); got != muxwire.TransportKey {
			return res, fmt.Errorf("stream %d: negotiated %q, want the mux", i, got)
		}
	}

	var items atomic.Uint64
	var consumers, producers sync.WaitGroup
	for i, a := range anchors {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for {
				p, err := a.NextBytes(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					setErr(fmt.Errorf("stream %d: read: %w", i, err))
					return
				}
				if len(p) != cfg.ItemBytes {
					setErr(fmt.Errorf("stream %d: item of %d bytes, want %d", i, len(p), cfg.ItemBytes))
					return
				}
				items.Add(1)
			}
		}()
	}
	item := make([]byte, cfg.ItemBytes)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	for i, s := range senders {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for time.Now().Before(deadline) {
				if err := s.SendBytes(ctx, item); err != nil {
					setErr(fmt.Errorf("stream %d: send: %w", i, err))
					return
				}
			}
			if err := s.Finalize(); err != nil {
				setErr(fmt.Errorf("stream %d: finalize: %w", i, err))
			}
		}()
	}
	producers.Wait()
	consumers.Wait()
	res.elapsed = time.Since(start)
	if firstErr != nil {
		return res, firstErr
	}
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	res.items = items.Load()
	res.handlerBytes, res.wireBytes = tap.snapshot()
	if want, got := min(lanes, streams), lanesUsed(res.handlerBytes); got < want {
		return res, fmt.Errorf("mux data on %d lanes (%v), want %d", got, res.handlerBytes[:lanes], want)
	}
	return res, nil
}
