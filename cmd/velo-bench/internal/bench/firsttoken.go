package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/streaming"
)

// The first-token harness asks what a flush policy costs a stream that is
// alone: one consumer node owns the anchors, and one producer node per
// arm, each with its own mux flush policy, opens one stream at a time to
// it (an attach, or a ticket the consumer minted), sends one token, and
// ends the stream. The figure is the time from the producer's send to the
// consumer's read of that token. The streams of the arms alternate one by
// one (the order rotated per rep), so drift over a rep reaches every arm;
// each rep runs on fresh nodes.
//
// Arms:
//   - auto: FlushAuto (the Rust reference's Auto{on_admission: true});
//   - linger: FlushLinger with MaxLinger = Linger and no early end;
//   - linger-complete: the same with OnComplete.

// FirstTokenArms are the arms of the first-token harness.
var FirstTokenArms = []string{"auto", "linger", "linger-complete"}

const firstTokenHarness = "first-token"

// FirstTokenConfig sets the first-token harness.
type FirstTokenConfig struct {
	Arms []string
	// Setup is how a producer opens each stream: "ticket" (the consumer
	// pre-binds and hands over the ticket; OpenAnchorStream) or "attach"
	// (AttachAnchor, one round trip).
	Setup   string
	Streams int           // measured streams per arm and rep
	Linger  time.Duration // MaxLinger of the linger arms
	// Gap is a pause after every stream, so that a producer's previous
	// write is long past when its next stream starts.
	Gap     time.Duration
	Reps    int
	Timeout time.Duration // bounds one rep
}

// Validate reports a config that cannot run.
func (c FirstTokenConfig) Validate() error {
	if len(c.Arms) == 0 {
		return errors.New("no arm to run")
	}
	for _, a := range c.Arms {
		if !slices.Contains(FirstTokenArms, a) {
			return fmt.Errorf("unknown arm %q (want %v)", a, FirstTokenArms)
		}
	}
	if c.Setup != "ticket" && c.Setup != "attach" {
		return fmt.Errorf("unknown setup %q (want ticket or attach)", c.Setup)
	}
	if c.Streams < 1 || c.Reps < 1 || c.Linger <= 0 || c.Gap < 0 {
		return errors.New("streams, reps and linger must be positive, gap not negative")
	}
	return nil
}

func firstTokenMux(arm string, linger time.Duration) streaming.MuxConfig {
	switch arm {
	case "linger":
		return streaming.MuxConfig{Flush: streaming.FlushLinger, MaxLinger: linger}
	case "linger-complete":
		return streaming.MuxConfig{Flush: streaming.FlushLinger, MaxLinger: linger, OnComplete: true}
	}
	return streaming.MuxConfig{Flush: streaming.FlushAuto}
}

// FirstToken runs the harness and adds its figures to r.
func FirstToken(cfg FirstTokenConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	params := map[string]any{"setup": cfg.Setup, "streams": cfg.Streams,
		"linger_us": cfg.Linger.Microseconds(), "gap_us": cfg.Gap.Microseconds()}
	for rep := 0; rep < cfg.Reps; rep++ {
		if err := firstTokenRep(cfg, rotated(cfg.Arms, rep), params, r); err != nil {
			return fmt.Errorf("rep %d: %w", rep+1, err)
		}
	}
	if !slices.Contains(cfg.Arms, "auto") {
		return nil
	}
	// Differences to auto, paired by rep.
	for _, arm := range cfg.Arms {
		if arm == "auto" {
			continue
		}
		for _, q := range []string{"p50", "p99"} {
			metric := "first_token_" + q + "_us"
			num, _ := r.Find(firstTokenHarness, arm, metric, params)
			den, _ := r.Find(firstTokenHarness, "auto", metric, params)
			for i := 0; i < min(len(num.Samples), len(den.Samples)); i++ {
				r.Add(firstTokenHarness, arm+"_minus_auto", "first_token_"+q+"_diff_us", "us",
					num.Samples[i]-den.Samples[i], params)
			}
		}
	}
	return nil
}

// firstTokenRep is one rep: fresh nodes, the arms' streams alternating in
// the given order.
func firstTokenRep(cfg FirstTokenConfig, order []string, params map[string]any, r *Report) error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), cfg.Timeout, errors.New("rep timed out"))
	defer cancel()
	start := func(mc streaming.MuxConfig) (*velo.Node, error) {
		tr, err := NewTransport("tcp")
		if err != nil {
			return nil, err
		}
		return velo.New(ctx, velo.WithTransport(tr), velo.WithMux(mc))
	}
	consumer, err := start(streaming.MuxConfig{})
	if err != nil {
		return err
	}
	defer shutdownWithin(consumer, 5*time.Second)
	producers := map[string]*velo.Node{}
	for _, arm := range order {
		p, err := start(firstTokenMux(arm, cfg.Linger))
		if err != nil {
			return err
		}
		defer shutdownWithin(p, 5*time.Second)
		if err := consumer.RegisterPeer(p.PeerInfo()); err != nil {
			return err
		}
		if err := p.RegisterPeer(consumer.PeerInfo()); err != nil {
			return err
		}
		producers[arm] = p
		// One stream first, unmeasured: the producer's hello to the
		// consumer and the connections are made here.
		if _, _, err := firstTokenStream(ctx, cfg.Setup, consumer, p, time.Now()); err != nil {
			return fmt.Errorf("%s: warm-up: %w", arm, err)
		}
	}
	base := time.Now()
	sendRead := map[string][]int64{}
	openRead := map[string][]int64{}
	for k := 0; k < cfg.Streams*len(order); k++ {
		arm := order[k%len(order)]
		sr, or, err := firstTokenStream(ctx, cfg.Setup, consumer, producers[arm], base)
		if err != nil {
			return fmt.Errorf("%s, stream %d: %w", arm, k/len(order), err)
		}
		sendRead[arm] = append(sendRead[arm], sr)
		openRead[arm] = append(openRead[arm], or)
		if cfg.Gap > 0 {
			time.Sleep(cfg.Gap)
		}
	}
	for _, arm := range order {
		s := slices.Clone(sendRead[arm])
		slices.Sort(s)
		o := slices.Clone(openRead[arm])
		slices.Sort(o)
		at := func(xs []int64, q float64) float64 { return float64(xs[int(q*float64(len(xs)-1))]) / 1e3 }
		r.Add(firstTokenHarness, arm, "first_token_p50_us", "us", at(s, 0.5), params)
		r.Add(firstTokenHarness, arm, "first_token_p99_us", "us", at(s, 0.99), params)
		r.Add(firstTokenHarness, arm, "open_to_first_p50_us", "us", at(o, 0.5), params)
		r.Add(firstTokenHarness, arm, "open_to_first_p99_us", "us", at(o, 0.99), params)
	}
	return nil
}

// firstTokenStream is one lone stream from producer to consumer: open
// (ticket or attach), send one token, read it, finalize, read the end. It
// returns, in nanoseconds, send → read of the token and the start of the
// open → read of the token.
func firstTokenStream(ctx context.Context, setup string, consumer, producer *velo.Node, base time.Time) (sendRead, openRead int64, err error) {
	a, err := streaming.CreateAnchor[[]byte](consumer.Streams)
	if err != nil {
		return 0, 0, err
	}
	defer a.Close()
	type read struct {
		at  time.Time
		p   []byte
		err error
	}
	got := make(chan read, 1)
	go func() {
		p, err := a.NextBytes(ctx)
		got <- read{time.Now(), p, err}
	}()
	t0 := time.Now()
	var s *streaming.Sender[[]byte]
	if setup == "ticket" {
		tk, err := consumer.Streams.PrebindAnchor(a.Handle())
		if err != nil {
			return 0, 0, fmt.Errorf("prebind: %w", err)
		}
		s, err = streaming.OpenAnchorStream[[]byte](ctx, producer.Streams, a.Handle(), tk)
		if err != nil {
			return 0, 0, fmt.Errorf("open: %w", err)
		}
	} else {
		s, err = streaming.AttachAnchor[[]byte](ctx, producer.Streams, a.Handle())
		if err != nil {
			return 0, 0, fmt.Errorf("attach: %w", err)
		}
	}
	defer s.Close()
	if key := s.NegotiatedTransport(); key != "messenger-mux-v2" {
		return 0, 0, fmt.Errorf("negotiated %q, want messenger-mux-v2", key)
	}
	tok := make([]byte, rpTokenBytes)
	sent := time.Now()
	binary.BigEndian.PutUint64(tok, uint64(sent.Sub(base)))
	if err := s.SendBytes(ctx, tok); err != nil {
		return 0, 0, fmt.Errorf("send: %w", err)
	}
	var rd read
	select {
	case rd = <-got:
	case <-ctx.Done():
		return 0, 0, context.Cause(ctx)
	}
	if rd.err != nil {
		return 0, 0, fmt.Errorf("read: %w", rd.err)
	}
	if !slices.Equal(rd.p, tok) {
		return 0, 0, errors.New("the token read is not the token sent")
	}
	if err := s.Finalize(); err != nil {
		return 0, 0, fmt.Errorf("finalize: %w", err)
	}
	if _, err := a.NextBytes(ctx); !errors.Is(err, io.EOF) {
		return 0, 0, fmt.Errorf("after the token: %v, want the end", err)
	}
	return int64(rd.at.Sub(sent)), int64(rd.at.Sub(t0)), nil
}
