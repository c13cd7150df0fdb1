package velo_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/transport/tcp"
)

// A node records into a registry of the caller's: register VeloMetrics
// into it, pass it with WithMetrics, and serve the registry with promhttp
// (here one scrape is read in place). A handler's series appear when it
// first runs; velo's own handlers (the client's handshake, _hello) are
// counted together under handler="_system".
func ExampleWithMetrics() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	vm, err := metrics.Register(reg)
	if err != nil {
		log.Fatal(err)
	}
	tr, err := tcp.New()
	if err != nil {
		log.Fatal(err)
	}
	server, err := velo.New(ctx, velo.WithTransport(tr), velo.WithMetrics(vm))
	if err != nil {
		log.Fatal(err)
	}
	defer server.Shutdown(context.Background())
	scrape := promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) // http.Handle("/metrics", scrape)

	server.Register(velo.UnaryHandler("greet", func(c *velo.Context) ([]byte, error) {
		return append([]byte("hello "), c.Payload...), nil
	}))
	client := startNode(ctx)
	defer client.Shutdown(context.Background())
	client.RegisterPeer(server.PeerInfo())
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := client.Unary(ctx, server.InstanceID(), "greet", []byte("velo")); err != nil {
		log.Fatal(err)
	}

	rec := httptest.NewRecorder()
	scrape.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "velo_messenger_handler_requests_total") {
			fmt.Print(line)
		}
	}
	// Output:
	// velo_messenger_handler_requests_total{handler="_system",outcome="success",response_type="unary"} 1
	// velo_messenger_handler_requests_total{handler="greet",outcome="success",response_type="unary"} 1
}

// With WithSystemHandlerMetrics, velo's own handlers have series of their
// own instead of sharing handler="_system": here the handshake (_hello)
// that the client ran before its first call.
func ExampleWithSystemHandlerMetrics() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	vm, err := metrics.Register(reg)
	if err != nil {
		log.Fatal(err)
	}
	tr, err := tcp.New()
	if err != nil {
		log.Fatal(err)
	}
	server, err := velo.New(ctx, velo.WithTransport(tr), velo.WithMetrics(vm), velo.WithSystemHandlerMetrics())
	if err != nil {
		log.Fatal(err)
	}
	defer server.Shutdown(context.Background())
	server.Register(velo.SyncHandler("store", func(*velo.Context) error { return nil }))
	client := startNode(ctx)
	defer client.Shutdown(context.Background())
	client.RegisterPeer(server.PeerInfo())
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Sync(ctx, server.InstanceID(), "store", nil); err != nil {
		log.Fatal(err)
	}

	fmt.Println(testutil.ToFloat64(vm.HandlerRequests.WithLabelValues("_hello", "unary", "success")))
	fmt.Println(testutil.ToFloat64(vm.HandlerRequests.WithLabelValues("store", "sync", "success")))
	// Output:
	// 1
	// 1
}
