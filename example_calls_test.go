package velo_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"time"

	"github.com/velo-go/velo"
)

// startPair starts two nodes over TCP loopback and registers the server
// with the client, which is all a caller needs before its first call. stop
// shuts both down.
func startPair(ctx context.Context) (server, client *velo.Node, stop func()) {
	server = startNode(ctx)
	client = startNode(ctx)
	if err := client.RegisterPeer(server.PeerInfo()); err != nil {
		log.Fatal(err)
	}
	return server, client, func() {
		client.Shutdown(context.Background())
		server.Shutdown(context.Background())
	}
}

// Send is fire-and-forget: it returns once a transport took the message,
// and the caller hears nothing back. The handler here tells the example
// on a channel that it ran.
func ExampleNode_Send() {
	ctx := context.Background()
	server, client, stop := startPair(ctx)
	defer stop()

	got := make(chan string, 1)
	err := server.Register(velo.FireHandler("log", func(c *velo.Context) {
		got <- string(c.Payload) // Payload is valid only until the handler returns
	}))
	if err != nil {
		log.Fatal(err)
	}

	if err := client.Send(ctx, server.InstanceID(), "log", []byte("disk 91% full")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("server logged:", <-got)
	// Output: server logged: disk 91% full
}

// Sync waits until the remote handler has run, and returns its error: the
// caller knows the work is done, but gets no payload back.
func ExampleNode_Sync() {
	ctx := context.Background()
	server, client, stop := startPair(ctx)
	defer stop()

	stored := make(chan string, 1)
	server.Register(velo.SyncHandler("store", func(c *velo.Context) error {
		stored <- string(c.Payload)
		return nil // a non-nil error comes back from Sync as a *velo.RemoteError
	}))

	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Sync(ctx, server.InstanceID(), "store", []byte("checkpoint 7")); err != nil {
		log.Fatal(err)
	}
	select {
	case v := <-stored: // the handler has run: this never waits
		fmt.Printf("stored %q before Sync returned\n", v)
	default:
		fmt.Println("Sync returned before the handler ran")
	}
	// Output: stored "checkpoint 7" before Sync returned
}

// Unary is a request and its answer. The context's deadline bounds the
// whole call.
func ExampleNode_Unary() {
	ctx := context.Background()
	server, client, stop := startPair(ctx)
	defer stop()

	server.Register(velo.UnaryHandler("upper", func(c *velo.Context) ([]byte, error) {
		return bytes.ToUpper(c.Payload), nil
	}))

	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := client.Unary(ctx, server.InstanceID(), "upper", []byte("hello"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(resp))
	// Output: HELLO
}

// UnaryAsync sends the request and returns at once; the callback runs
// once, with the answer or the error. No goroutine waits for the answer,
// so a caller with many calls in flight pays for none. Keep the callback
// short: hand the answer on, as here.
func ExampleNode_UnaryAsync() {
	ctx := context.Background()
	server, client, stop := startPair(ctx)
	defer stop()

	server.Register(velo.UnaryHandler("square", func(c *velo.Context) ([]byte, error) {
		n := int(c.Payload[0])
		return []byte{byte(n * n)}, nil
	}))

	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	answers := make(chan int, 3)
	for _, n := range []byte{2, 3, 4} {
		err := client.UnaryAsync(ctx, server.InstanceID(), "square", []byte{n}, func(resp []byte, err error) {
			if err != nil {
				log.Print(err)
				answers <- -1
				return
			}
			answers <- int(resp[0])
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	sum := 0
	for range 3 {
		sum += <-answers // the answers may come in any order
	}
	fmt.Println("4 + 9 + 16 =", sum)
	// Output: 4 + 9 + 16 = 29
}
