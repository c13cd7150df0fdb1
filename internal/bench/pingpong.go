package bench

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/velo-go/velo"
)

// PingPongConfig sets the ping-pong harness.
type PingPongConfig struct {
	Transport string
	Payload   int
	Iters     int
	Reps      int
	Arms      []string // raw, velo, grpc
}

// PingPong measures a unary round trip at depth 1: velo against a raw TCP
// ping-pong with the same payload and against grpc-go unary with a
// raw-bytes codec, in the same run.
func PingPong(cfg PingPongConfig, r *Report) error {
	params := map[string]any{"transport": cfg.Transport, "payload_bytes": cfg.Payload, "iters": cfg.Iters}
	arms := map[string]func(PingPongConfig) ([]time.Duration, error){
		"raw": pingRaw, "velo": pingVelo, "grpc": pingGRPC,
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, arm := range cfg.Arms {
			fn, ok := arms[arm]
			if !ok {
				return fmt.Errorf("unknown arm %q", arm)
			}
			rtts, err := fn(cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", arm, err)
			}
			sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
			us := func(q float64) float64 { return float64(rtts[int(q*float64(len(rtts)-1))]) / 1e3 }
			r.Add("ping-pong", arm, "rtt_p50_us", "us", us(0.5), params)
			r.Add("ping-pong", arm, "rtt_p99_us", "us", us(0.99), params)
		}
	}
	v, _ := r.Find("ping-pong", "velo", "rtt_p50_us", params)
	for _, base := range []string{"raw", "grpc"} {
		if b, ok := r.Find("ping-pong", base, "rtt_p50_us", params); ok {
			r.Ratio("ping-pong", "velo/"+base, "rtt_p50_ratio", v, b, params)
		}
	}
	return nil
}

// pingRaw is a ping-pong on one plain socket, the reply on the same socket.
func pingRaw(cfg PingPongConfig) ([]time.Duration, error) {
	return socketPingPong(cfg.Transport, cfg.Payload, cfg.Iters)
}

// veloPair starts two nodes over kind, B serving "echo".
func veloPair(ctx context.Context, kind string) (a, b *velo.Node, stop func(), err error) {
	start := func() (*velo.Node, error) {
		tr, err := NewTransport(kind)
		if err != nil {
			return nil, err
		}
		return velo.New(ctx, velo.WithTransport(tr))
	}
	if a, err = start(); err != nil {
		return nil, nil, nil, err
	}
	if b, err = start(); err != nil {
		a.Shutdown(velo.WaitForever())
		return nil, nil, nil, err
	}
	stop = func() {
		a.Shutdown(velo.Timeout(5 * time.Second))
		b.Shutdown(velo.Timeout(5 * time.Second))
	}
	if err = b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return append([]byte(nil), c.Payload...), nil
	})); err == nil {
		err = a.RegisterPeer(b.PeerInfo())
	}
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return a, b, stop, nil
}

func pingVelo(cfg PingPongConfig) ([]time.Duration, error) {
	ctx := context.Background()
	a, b, stop, err := veloPair(ctx, cfg.Transport)
	if err != nil {
		return nil, err
	}
	defer stop()
	payload := make([]byte, cfg.Payload)
	target := b.InstanceID()
	rtts := make([]time.Duration, 0, cfg.Iters)
	for i := 0; i < warmup+cfg.Iters; i++ {
		t0 := time.Now()
		if _, err := a.Unary(ctx, target, "echo", payload); err != nil {
			return nil, err
		}
		if i >= warmup {
			rtts = append(rtts, time.Since(t0))
		}
	}
	return rtts, nil
}

func pingGRPC(cfg PingPongConfig) ([]time.Duration, error) {
	addr, stop, err := grpcEchoServer()
	if err != nil {
		return nil, err
	}
	defer stop()
	cc, err := grpcClient(addr)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx := context.Background()
	req := make([]byte, cfg.Payload)
	var resp []byte
	rtts := make([]time.Duration, 0, cfg.Iters)
	for i := 0; i < warmup+cfg.Iters; i++ {
		t0 := time.Now()
		if err := grpcCall(ctx, cc, req, &resp); err != nil {
			return nil, err
		}
		if i >= warmup {
			rtts = append(rtts, time.Since(t0))
		}
	}
	return rtts, nil
}
