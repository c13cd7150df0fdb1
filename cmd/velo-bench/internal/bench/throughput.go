package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
)

// ThroughputConfig sets the transport-level throughput harness.
type ThroughputConfig struct {
	Transport string
	Sizes     []int    // payload bytes per frame
	Modes     []string // "pipelined", "inflight"
	InFlight  int      // requests outstanding in the inflight mode
	Bytes     int64    // bytes to move per pipelined run (bounds the frame count)
	MaxFrames int      // frames per pipelined run at most
	Calls     int      // round trips per inflight run at most
	Reps      int
}

// Throughput measures the transport against a raw socket in the same run.
// Pipelined: one side sends frames as fast as it can, the other counts
// them. Inflight: one side keeps N requests outstanding and the other
// echoes each one back.
//
// In pipelined mode the velo arm's consumer is the adapter's sink on the
// reader goroutine, which is how velo's own messenger consumes a transport
// (and how tx-budget's L3 rung does); the velo-queue arm consumes from the
// adapter's queue on a goroutine of its own, as an out-of-tree consumer
// might. Both are printed. Each rep runs the arms in a rotated order (see
// rotated).
//
// Transport may name several transports, comma-separated ("tcp,tls"):
// every arm then runs on each, rotated per rep, and each arm on a later
// transport gets a ratio to the same arm on the first ("velo tls/tcp").
func Throughput(cfg ThroughputConfig, r *Report) error {
	kinds := strings.Split(cfg.Transport, ",")
	params := func(kind string, size int, mode string) map[string]any {
		p := map[string]any{"transport": kind, "size_bytes": size, "mode": mode}
		if mode == "inflight" {
			p["in_flight"] = cfg.InFlight
		}
		return p
	}
	armsOf := func(mode string) []string {
		if mode == "pipelined" {
			return []string{"raw", "velo", "velo-queue"}
		}
		return []string{"raw", "velo"}
	}
	armsFor := func(kind, mode string) []string {
		arms := armsOf(mode)
		if !rawSocket(kind) {
			arms = arms[1:] // no socket of that kind to compare with
		}
		return arms
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, size := range cfg.Sizes {
			for _, mode := range cfg.Modes {
				for _, kind := range rotated(kinds, rep) {
					c := cfg
					c.Transport = kind
					for _, arm := range rotated(armsFor(kind, mode), rep) {
						if err := throughputRun(c, arm, mode, size, params(kind, size, mode), r); err != nil {
							return fmt.Errorf("%s %s %d over %s: %w", arm, mode, size, kind, err)
						}
					}
				}
			}
		}
	}
	for _, size := range cfg.Sizes {
		for _, mode := range cfg.Modes {
			for _, kind := range kinds {
				p := params(kind, size, mode)
				raw, _ := r.Find("throughput", "raw", "frames_per_s", p)
				for _, arm := range []string{"velo", "velo-queue"} {
					if v, ok := r.Find("throughput", arm, "frames_per_s", p); ok {
						r.Ratio("throughput", arm+"/raw", "frames_per_s_ratio", v, raw, p)
					}
				}
			}
			for _, kind := range kinds[1:] {
				for _, arm := range armsFor(kind, mode) {
					v, ok1 := r.Find("throughput", arm, "frames_per_s", params(kind, size, mode))
					b, ok2 := r.Find("throughput", arm, "frames_per_s", params(kinds[0], size, mode))
					if ok1 && ok2 {
						r.Ratio("throughput", arm+" "+kind+"/"+kinds[0], "frames_per_s_ratio", v, b, params(kind+"/"+kinds[0], size, mode))
					}
				}
			}
		}
	}
	return nil
}

// rawSocket says whether the raw arms have a socket of this kind: tcp,
// tls and uds do; a transport with lanes (KIND:N), QUIC, gRPC, ZeroMQ and
// NATS do not.
func rawSocket(kind string) bool { return kind == "tcp" || kind == "tls" || kind == "uds" }

func throughputRun(cfg ThroughputConfig, arm, mode string, size int, params map[string]any, r *Report) error {
	var frames int
	var el time.Duration
	var lat []time.Duration
	var err error
	switch mode {
	case "pipelined":
		frames = int(min(int64(cfg.MaxFrames), cfg.Bytes/int64(size)))
		switch arm {
		case "raw":
			el, err = rawPipelined(cfg.Transport, size, frames)
		case "velo":
			el, err = veloPipelinedSink(cfg.Transport, size, frames)
		default:
			el, err = veloPipelined(cfg.Transport, size, frames)
		}
	case "inflight":
		frames = max(cfg.InFlight, min(cfg.Calls, int(cfg.Bytes/int64(size)/4)))
		if arm == "raw" {
			el, lat, err = rawInflight(cfg.Transport, size, frames, cfg.InFlight)
		} else {
			el, lat, err = veloInflight(cfg.Transport, size, frames, cfg.InFlight)
		}
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		return err
	}
	fps := float64(frames) / el.Seconds()
	r.Add("throughput", arm, "frames_per_s", "per_s", fps, params)
	r.Add("throughput", arm, "mib_per_s", "mib_per_s", fps*float64(size)/(1<<20), params)
	if lat != nil {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		r.Add("throughput", arm, "rtt_p50_us", "us", float64(lat[len(lat)/2])/1e3, params)
		r.Add("throughput", arm, "rtt_p99_us", "us", float64(lat[len(lat)*99/100])/1e3, params)
	}
	return nil
}

// rawPipelined is the baseline: length-prefixed frames through bufio on a
// plain socket, read back into a reused buffer.
func rawPipelined(kind string, size, frames int) (time.Duration, error) {
	c, s, cleanup, err := socketPair(kind)
	if err != nil {
		return 0, err
	}
	defer cleanup()
	done := make(chan error, 1)
	go func() { done <- rawCount(s, frames, nil) }()
	start := time.Now()
	w := bufio.NewWriterSize(c, 64<<10)
	payload := make([]byte, size)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(size))
	for i := 0; i < frames; i++ {
		w.Write(hdr[:])
		w.Write(payload)
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	if err := <-done; err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// rawCount reads frames, echoing each back on echo when it is not nil.
func rawCount(conn net.Conn, frames int, echo net.Conn) error {
	br := bufio.NewReaderSize(conn, 64<<10)
	var bw *bufio.Writer
	if echo != nil {
		bw = bufio.NewWriterSize(echo, 64<<10)
	}
	var hdr [4]byte
	var buf []byte
	for i := 0; i < frames; i++ {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return err
		}
		if bw != nil {
			bw.Write(hdr[:])
			bw.Write(buf[:n])
			// Flush when nothing more is waiting, so replies are not held back.
			if br.Buffered() == 0 {
				if err := bw.Flush(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func veloPipelined(kind string, size, frames int) (time.Duration, error) {
	a, b, err := Pair(kind)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Dial before the clock starts, as the raw arm's socket is connected.
	if err := warm(ctx, a, b); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- drainMessages(ctx, b, frames, nil) }()
	start := time.Now()
	f := ext.Frame{Type: ext.Message, Payload: make([]byte, size)}
	lanes := a.T.Lanes(b.ID)
	for i := 0; i < frames; i++ {
		out, err := a.T.SendOnLane(b.ID, i%lanes, f)
		if err != nil {
			return 0, err
		}
		if err := out.Wait(ctx); err != nil {
			return 0, err
		}
	}
	if err := <-done; err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// veloPipelinedSink is veloPipelined with the receiver consuming through
// the adapter's sink on its reader goroutine.
func veloPipelinedSink(kind string, size, frames int) (time.Duration, error) {
	var got atomic.Int64
	done := make(chan struct{})
	var target atomic.Int64 // the frames, and one warm-up frame per lane
	sink := func(batch []ext.InboundMessage) {
		ext.DoneAll(batch)
		if got.Add(int64(len(batch))) == target.Load() {
			close(done)
		}
	}
	a, b, err := PairWith(kind, ext.AdapterConfig{}, ext.AdapterConfig{OnMessages: sink})
	if err != nil {
		return 0, err
	}
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := ext.Frame{Type: ext.Message, Payload: make([]byte, size)}
	// Dial every lane before the clock starts, as the raw arm's socket is
	// connected.
	warmLanes := a.T.Lanes(b.ID)
	target.Store(int64(frames + warmLanes))
	for l := range warmLanes {
		if _, err := a.T.SendOnLane(b.ID, l, f); err != nil {
			return 0, err
		}
	}
	for got.Load() < int64(warmLanes) {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		runtime.Gosched()
	}
	start := time.Now()
	lanes := a.T.Lanes(b.ID)
	for i := 0; i < frames; i++ {
		out, err := a.T.SendOnLane(b.ID, i%lanes, f)
		if err != nil {
			return 0, err
		}
		if err := out.Wait(ctx); err != nil {
			return 0, err
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		return 0, fmt.Errorf("received %d of %d frames", got.Load()-int64(warmLanes), frames)
	}
	return time.Since(start), nil
}

func warm(ctx context.Context, a, b *Node) error {
	if _, err := a.T.Send(b.ID, ext.Frame{Type: ext.Message}); err != nil {
		return err
	}
	m, err := b.Adapter.Messages().Pop(ctx)
	m.Done()
	if err != nil {
		return err
	}
	if _, err := b.T.Send(a.ID, ext.Frame{Type: ext.Response}); err != nil {
		return err
	}
	_, err = a.Adapter.Responses().Pop(ctx)
	return err
}

// drainMessages takes n messages off b's queue, echoing each to back as a
// Response when back is not nil.
func drainMessages(ctx context.Context, b *Node, n int, back *Node) error {
	var batch []ext.InboundMessage
	for got := 0; got < n; {
		var err error
		if batch, err = b.Adapter.Messages().PopAll(ctx, batch[:0]); err != nil {
			return err
		}
		if back == nil {
			ext.DoneAll(batch)
			got += len(batch)
			continue
		}
		for _, m := range batch {
			{
				out, err := b.T.Send(back.ID, ext.Frame{Type: ext.Response, Header: m.Header, Payload: m.Payload})
				if err == nil {
					err = out.Wait(ctx)
				}
				if err != nil {
					return err
				}
			}
			m.Done()
		}
		got += len(batch)
	}
	return nil
}

// rawInflight keeps window requests outstanding on one socket pair, the
// replies on the same socket (rawEchoWindow).
func rawInflight(kind string, size, calls, window int) (time.Duration, []time.Duration, error) {
	c, s, cleanup, err := socketPair(kind)
	if err != nil {
		return 0, nil, err
	}
	var wg sync.WaitGroup
	defer func() {
		cleanup()
		wg.Wait()
	}()
	res, err := rawEchoWindow(c, s, size, 0, calls, window, &wg)
	return res.el, res.lat, err
}

// rawEchoWindow is the raw arm of the modes with requests in flight: rawCount
// on s echoes every request, and rawWindow on c keeps window of them
// outstanding, first for warm untimed calls and then for calls timed ones.
// Both sides coalesce their writes as velo's transport does. Goroutines it
// starts are counted in wg; closing c and s ends them.
func rawEchoWindow(c, s net.Conn, size, warm, calls, window int, wg *sync.WaitGroup) (msgResult, error) {
	srvErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := rawCount(s, warm+calls, s)
		if err != nil {
			s.Close() // the client's reader fails now, not at a deadline
		}
		srvErr <- err
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	if warm > 0 {
		if _, err := rawWindow(c, br, size, warm, window, wg); err != nil {
			return msgResult{}, err
		}
	}
	res, err := rawWindow(c, br, size, calls, window, wg)
	if err != nil {
		return msgResult{}, err
	}
	return res, <-srvErr
}

// rawWindow keeps window length-prefixed requests of size bytes outstanding
// on c until calls replies have come back through br, and stops on the
// first error instead of waiting for credit that will not come. Replies
// come back in order, so reply i answers request i.
//
// It writes as velo's transport does, one write per batch of whatever is
// queued: each time the sender looks, every request that may go (the rest
// of the window, and one more for each reply read since) leaves in one
// gathered write, never one write per request. rawCount's echo coalesces
// its replies the same way.
func rawWindow(c net.Conn, br *bufio.Reader, size, calls, window int, wg *sync.WaitGroup) (msgResult, error) {
	sent := make([]int64, calls) // ns since start, written before the request goes out
	lat := make([]time.Duration, 0, calls)
	credit := make(chan struct{}, window)
	failed := make(chan struct{})
	var readErr error
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		var hdr [4]byte
		buf := make([]byte, size)
		for i := 0; i < calls; i++ {
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				readErr = err
				close(failed)
				return
			}
			if n := int(binary.BigEndian.Uint32(hdr[:])); n != size {
				readErr = fmt.Errorf("reply of %d bytes, want %d", n, size)
				close(failed)
				return
			}
			if _, err := io.ReadFull(br, buf); err != nil {
				readErr = err
				close(failed)
				return
			}
			lat = append(lat, time.Since(start)-time.Duration(atomic.LoadInt64(&sent[i])))
			credit <- struct{}{}
		}
		close(credit)
	}()
	frame := binary.BigEndian.AppendUint32(nil, uint32(size))
	frame = append(frame, make([]byte, size)...)
	batch := make(net.Buffers, 0, window)
	writes := 0
	free := window // requests that may go now
	for i := 0; i < calls; {
		if free == 0 {
			select {
			case <-credit:
				free++
			case <-failed:
				return msgResult{}, fmt.Errorf("reading replies: %w", readErr)
			}
		}
	take:
		for free < calls-i {
			select {
			case <-credit:
				free++
			default:
				break take
			}
		}
		k := min(free, calls-i)
		now := int64(time.Since(start))
		batch = batch[:0]
		for j := i; j < i+k; j++ {
			atomic.StoreInt64(&sent[j], now)
			batch = append(batch, frame)
		}
		// Every request is the same bytes, so the batch is k references to
		// one frame: a writev, no copy. WriteTo consumes the slice it is
		// called on, so it gets a copy and batch keeps its capacity.
		v := batch
		if _, err := v.WriteTo(c); err != nil {
			return msgResult{}, err
		}
		writes++
		free -= k
		i += k
	}
	// The reader closes credit after the last reply.
	for {
		select {
		case _, ok := <-credit:
			if !ok {
				return msgResult{el: time.Since(start), lat: lat, writes: writes}, nil
			}
		case <-failed:
			return msgResult{}, fmt.Errorf("reading replies: %w", readErr)
		}
	}
}

func veloInflight(kind string, size, calls, window int) (time.Duration, []time.Duration, error) {
	a, b, err := Pair(kind)
	if err != nil {
		return 0, nil, err
	}
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := warm(ctx, a, b); err != nil {
		return 0, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- drainMessages(ctx, b, calls, a) }()
	sent := make([]time.Time, calls)
	lat := make([]time.Duration, 0, calls)
	readErr := make(chan error, 1)
	credit := make(chan struct{}, window)
	start := time.Now()
	go func() {
		var batch []ext.Frame
		for got := 0; got < calls; {
			var err error
			if batch, err = a.Adapter.Responses().PopAll(ctx, batch[:0]); err != nil {
				readErr <- err
				return
			}
			for range batch {
				lat = append(lat, time.Since(sent[got]))
				got++
				credit <- struct{}{}
			}
		}
		readErr <- nil
	}()
	f := ext.Frame{Type: ext.Message, Payload: make([]byte, size)}
	for i := 0; i < calls; i++ {
		if i >= window {
			<-credit
		}
		sent[i] = time.Now()
		if _, err := a.T.Send(b.ID, f); err != nil {
			return 0, nil, err
		}
	}
	if err := <-readErr; err != nil {
		return 0, nil, err
	}
	el := time.Since(start)
	return el, lat, <-done
}
