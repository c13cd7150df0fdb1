package velo_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/transport/tcp"
)

// startNode starts a node on a loopback TCP port.
func startNode(ctx context.Context) *velo.Node {
	tr, err := tcp.New()
	if err != nil {
		log.Fatal(err)
	}
	n, err := velo.New(ctx, velo.WithTransport(tr))
	if err != nil {
		log.Fatal(err)
	}
	return n
}

type AddRequest struct {
	A, B int
}

type AddResponse struct {
	Sum int `json:"sum"`
}

// Two nodes on one machine: the server registers a typed handler, the
// client registers the server as a peer and calls it. The payloads travel
// as JSON.
func Example() {
	ctx := context.Background()
	server := startNode(ctx)
	defer server.Shutdown(context.Background())
	client := startNode(ctx)
	defer client.Shutdown(context.Background())

	err := server.Register(velo.TypedUnaryHandler("add", func(c *velo.Context, req AddRequest) (AddResponse, error) {
		return AddResponse{Sum: req.A + req.B}, nil
	}))
	if err != nil {
		log.Fatal(err)
	}
	if err := client.RegisterPeer(server.PeerInfo()); err != nil {
		log.Fatal(err)
	}

	// The context's deadline is the call's timeout.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := velo.TypedUnary[AddResponse](ctx, client, server.InstanceID(), "add", AddRequest{A: 2, B: 3})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("2 + 3 =", resp.Sum)
	// Output: 2 + 3 = 5
}

// A handler's error comes back to the caller as a *velo.RemoteError, and a
// call that outlives its deadline fails with velo.ErrRequestTimeout.
func Example_errors() {
	ctx := context.Background()
	server := startNode(ctx)
	defer func() {
		// Drain for at most a second, then stop.
		stopCtx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		server.Shutdown(stopCtx)
	}()
	client := startNode(ctx)
	defer client.Shutdown(context.Background())

	release := make(chan struct{})
	defer close(release)
	server.Register(velo.SyncHandler("process", func(c *velo.Context) error {
		return errors.New("queue is full")
	}))
	server.Register(velo.UnaryHandler("slow", func(c *velo.Context) ([]byte, error) {
		<-release
		return nil, nil
	}))
	client.RegisterPeer(server.PeerInfo())

	err := client.Sync(ctx, server.InstanceID(), "process", []byte("job"))
	var re *velo.RemoteError
	if errors.As(err, &re) {
		fmt.Printf("handler %s failed: %s\n", re.Handler, re.Message)
	}

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = client.Unary(short, server.InstanceID(), "slow", nil)
	fmt.Println("timed out:", errors.Is(err, velo.ErrRequestTimeout), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// handler process failed: queue is full
	// timed out: true true
}
