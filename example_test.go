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

	server.Register(velo.SyncHandler("process", func(c *velo.Context) error {
		return errors.New("queue is full")
	}))
	server.Register(velo.UnaryHandler("slow", func(c *velo.Context) ([]byte, error) {
		<-c.Context().Done() // the caller's deadline ends it
		return nil, c.Context().Err()
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

// A handler's c.Context() carries the caller's deadline and ends when the
// caller gives up: here the client cancels its call while the handler
// waits, and the handler hears why.
func Example_handlerContext() {
	ctx := context.Background()
	server := startNode(ctx)
	defer server.Shutdown(context.Background())
	client := startNode(ctx)
	defer client.Shutdown(context.Background())

	started, stopped := make(chan bool), make(chan error, 1)
	server.Register(velo.UnaryHandler("work", func(c *velo.Context) ([]byte, error) {
		ctx := c.Context()
		_, hasDeadline := ctx.Deadline()
		started <- hasDeadline
		<-ctx.Done() // a real handler passes ctx to what it waits on
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	}))
	client.RegisterPeer(server.PeerInfo())

	call, cancel := context.WithTimeout(ctx, time.Minute)
	result := make(chan error, 1)
	go func() {
		_, err := client.Unary(call, server.InstanceID(), "work", nil)
		result <- err
	}()
	fmt.Println("the handler has the caller's deadline:", <-started)
	cancel()
	fmt.Println("the caller gets:", <-result)
	cause := <-stopped
	fmt.Println("the handler stops because:", cause, errors.Is(cause, velo.ErrCallerCancelled))
	// Output:
	// the handler has the caller's deadline: true
	// the caller gets: context canceled
	// the handler stops because: velo: the caller cancelled the call true
}
