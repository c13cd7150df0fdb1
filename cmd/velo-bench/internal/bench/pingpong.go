package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
)

// PingPongConfig sets the ping-pong harness.
type PingPongConfig struct {
	Transport string
	Payload   int
	Iters     int
	Reps      int
	Arms      []string // raw, velo, velo-inline, velo-async, grpc
}

// The velo arms of the ping-pong.
//
//   - velo: Unary, the caller's goroutine waits; the handler runs in the
//     default spawn mode.
//   - velo-inline: Unary to a WithInline handler.
//   - velo-async: UnaryAsync to a WithInline handler, each callback sending
//     the next request: no goroutine hand-off anywhere in the round trip.
var veloArms = []string{"velo", "velo-inline", "velo-async"}

// PingPong measures a unary round trip at depth 1: velo against a raw
// ping-pong with the same payload on the same kind of socket and against
// grpc-go unary with a raw-bytes codec, in the same run. Each rep runs the
// arms in a rotated order (see rotated). Transport may name several
// transports, comma-separated ("tcp,tls"): every arm then runs on each,
// the transports rotated per rep too, and each arm on a later transport
// gets a ratio to the same arm on the first ("velo tls/tcp").
func PingPong(cfg PingPongConfig, r *Report) error {
	kinds := strings.Split(cfg.Transport, ",")
	arms := map[string]func(PingPongConfig) ([]time.Duration, error){
		"raw": pingRaw, "grpc": pingGRPC,
		"velo":        func(c PingPongConfig) ([]time.Duration, error) { return pingVelo(c, "echo") },
		"velo-inline": func(c PingPongConfig) ([]time.Duration, error) { return pingVelo(c, "echo-inline") },
		"velo-async":  pingVeloAsync,
	}
	params := func(kind string) map[string]any {
		return map[string]any{"transport": kind, "payload_bytes": cfg.Payload, "iters": cfg.Iters}
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, kind := range rotated(kinds, rep) {
			c := cfg
			c.Transport = kind
			for _, arm := range rotated(cfg.Arms, rep) {
				fn, ok := arms[arm]
				if !ok {
					return fmt.Errorf("unknown arm %q", arm)
				}
				rtts, err := fn(c)
				if err != nil {
					return fmt.Errorf("%s over %s: %w", arm, kind, err)
				}
				sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
				us := func(q float64) float64 { return float64(rtts[int(q*float64(len(rtts)-1))]) / 1e3 }
				r.Add("ping-pong", arm, "rtt_p50_us", "us", us(0.5), params(kind))
				r.Add("ping-pong", arm, "rtt_p99_us", "us", us(0.99), params(kind))
			}
		}
	}
	for _, kind := range kinds {
		for _, arm := range veloArms {
			v, ok := r.Find("ping-pong", arm, "rtt_p50_us", params(kind))
			if !ok {
				continue
			}
			for _, base := range []string{"raw", "grpc"} {
				if b, ok := r.Find("ping-pong", base, "rtt_p50_us", params(kind)); ok {
					r.Ratio("ping-pong", arm+"/"+base, "rtt_p50_ratio", v, b, params(kind))
				}
			}
		}
	}
	for _, kind := range kinds[1:] {
		for _, arm := range cfg.Arms {
			v, ok1 := r.Find("ping-pong", arm, "rtt_p50_us", params(kind))
			b, ok2 := r.Find("ping-pong", arm, "rtt_p50_us", params(kinds[0]))
			if ok1 && ok2 {
				r.Ratio("ping-pong", arm+" "+kind+"/"+kinds[0], "rtt_p50_ratio", v, b, params(kind+"/"+kinds[0]))
			}
		}
	}
	return nil
}

// pingRaw is a ping-pong on one plain socket, the reply on the same socket.
func pingRaw(cfg PingPongConfig) ([]time.Duration, error) {
	return socketPingPong(cfg.Transport, cfg.Payload, cfg.Iters)
}

// veloPair starts two nodes over kind, B serving "echo" (spawn) and
// "echo-inline".
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
		a.Shutdown(context.Background())
		return nil, nil, nil, err
	}
	stop = func() {
		shutdownWithin(a, 5*time.Second)
		shutdownWithin(b, 5*time.Second)
	}
	if err = b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return append([]byte(nil), c.Payload...), nil
	})); err == nil {
		err = b.Register(velo.UnaryHandler("echo-inline", func(c *velo.Context) ([]byte, error) {
			return append([]byte(nil), c.Payload...), nil
		}, velo.WithInline()))
	}
	if err == nil {
		err = a.RegisterPeer(b.PeerInfo())
	}
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return a, b, stop, nil
}

// onVeloPair runs a ping-pong loop on a fresh node pair: loop gets the
// caller, the server's id and a payload of the configured size.
func onVeloPair(cfg PingPongConfig, loop func(ctx context.Context, a *velo.Node, target ext.InstanceID, payload []byte) ([]time.Duration, error)) ([]time.Duration, error) {
	ctx := context.Background()
	a, b, stop, err := veloPair(ctx, cfg.Transport)
	if err != nil {
		return nil, err
	}
	defer stop()
	return loop(ctx, a, b.InstanceID(), make([]byte, cfg.Payload))
}

func pingVelo(cfg PingPongConfig, h string) ([]time.Duration, error) {
	return onVeloPair(cfg, func(ctx context.Context, a *velo.Node, target ext.InstanceID, payload []byte) ([]time.Duration, error) {
		rtts := make([]time.Duration, 0, cfg.Iters)
		for i := 0; i < warmup+cfg.Iters; i++ {
			t0 := time.Now()
			if _, err := a.Unary(ctx, target, h, payload); err != nil {
				return nil, err
			}
			if i >= warmup {
				rtts = append(rtts, time.Since(t0))
			}
		}
		return rtts, nil
	})
}

// pingVeloAsync chains the calls: each callback, on the reader goroutine
// that got the reply, records the round trip and sends the next request.
func pingVeloAsync(cfg PingPongConfig) ([]time.Duration, error) {
	return onVeloPair(cfg, func(ctx context.Context, a *velo.Node, target ext.InstanceID, payload []byte) ([]time.Duration, error) {
		rtts := make([]time.Duration, 0, cfg.Iters)
		done := make(chan error, 1)
		var i int
		var t0 time.Time
		var next func([]byte, error)
		next = func(_ []byte, err error) {
			if err != nil {
				done <- err
				return
			}
			if i > warmup {
				rtts = append(rtts, time.Since(t0))
			}
			i++
			if i > warmup+cfg.Iters {
				done <- nil
				return
			}
			t0 = time.Now()
			if err := a.UnaryAsync(ctx, target, "echo-inline", payload, next); err != nil {
				done <- err
			}
		}
		next(nil, nil)
		return rtts, <-done
	})
}

func pingGRPC(cfg PingPongConfig) ([]time.Duration, error) {
	target, stop, err := grpcEchoServer(cfg.Transport)
	if err != nil {
		return nil, err
	}
	defer stop()
	cc, err := grpcClientOver(cfg.Transport, target)
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
