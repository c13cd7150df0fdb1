package velo_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
)

// TestDashboardLoad is not a check: it is the load behind the picture of
// docs/grafana/velo-dashboard.png (docs/grafana/render-preview.py). With
// VELO_DASHBOARD_LOAD set to a duration ("3m"), two nodes serve their
// registries at VELO_DASHBOARD_ADDRS (default
// "127.0.0.1:9464,127.0.0.1:9465") for a Prometheus server to scrape, and
// run calls, ordered calls, staged payloads and mux streams in waves for
// that long. Without the variable it is skipped.
func TestDashboardLoad(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("VELO_DASHBOARD_LOAD"))
	if err != nil {
		t.Skip("VELO_DASHBOARD_LOAD (a duration) not set: the load for the dashboard picture does not run")
	}
	addrs := strings.Split(os.Getenv("VELO_DASHBOARD_ADDRS"), ",")
	if len(addrs) != 2 {
		addrs = []string{"127.0.0.1:9464", "127.0.0.1:9465"}
	}
	frontendReg, fvm := registered(t)
	engineReg, evm := registered(t)
	frontend := node(t, velo.WithMetrics(fvm), velo.WithStagingThreshold(16<<10))
	engine := node(t, velo.WithMetrics(evm))
	for i, reg := range []http.Handler{
		promhttp.HandlerFor(frontendReg, promhttp.HandlerOpts{}),
		promhttp.HandlerFor(engineReg, promhttp.HandlerOpts{}),
	} {
		ln, err := net.Listen("tcp", addrs[i])
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: reg, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	echo := func(c *velo.Context) ([]byte, error) { return c.Payload[:min(len(c.Payload), 8)], nil }
	generate := velo.TypedUnaryHandler("generate", func(c *velo.Context, req struct {
		H streaming.AnchorHandle
		N int
	}) (int, error) {
		s, err := streaming.AttachAnchor[[]byte](c.Context(), engine.Streams, req.H)
		if err != nil {
			return 0, err
		}
		for range req.N {
			if err := s.Send(c.Context(), []byte("token-0123456789")); err != nil {
				return 0, err
			}
		}
		return req.N, s.Finalize()
	})
	for _, h := range []velo.Handler{velo.UnaryHandler("echo", echo), velo.UnaryHandler("ordered", echo, velo.WithOrdered()), generate} {
		if err := engine.Register(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := frontend.RegisterPeer(engine.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := engine.RegisterPeer(frontend.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	to := engine.InstanceID()
	small, staged := make([]byte, 256), make([]byte, 64<<10)
	worker := func(w int) error {
		for i := 0; ctx.Err() == nil; i++ {
			// Waves: the load rises and falls every 40 s, so the panels move.
			if busy := time.Now().Unix() / 20 % 2; busy == 0 && w%2 == 1 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			var err error
			switch i % 10 {
			case 0:
				_, err = frontend.Unary(ctx, to, "echo", staged) // through rendezvous
			case 1, 2:
				err = generateStream(ctx, frontend, to, 20+i%50)
			case 3:
				_, err = frontend.Unary(ctx, to, "ordered", small)
			default:
				_, err = frontend.Unary(ctx, to, "echo", small)
			}
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
		return nil
	}
	errs := make(chan error, 4)
	for w := range cap(errs) {
		go func() { errs <- worker(w) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Error(err)
		}
	}
}

// generateStream asks engine's "generate" for n tokens into an anchor of
// frontend's and reads them.
func generateStream(ctx context.Context, frontend *velo.Node, to ext.InstanceID, n int) error {
	a, err := streaming.CreateAnchor[[]byte](frontend.Streams)
	if err != nil {
		return err
	}
	defer a.Close()
	done := make(chan error, 1)
	go func() {
		_, err := velo.TypedUnary[int](ctx, frontend, to, "generate", struct {
			H streaming.AnchorHandle
			N int
		}{a.Handle(), n})
		done <- err
	}()
	for _, err := range a.All(ctx) {
		if err != nil {
			return err
		}
	}
	return <-done
}
