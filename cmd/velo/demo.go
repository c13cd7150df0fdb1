package main

import (
	"context"
	"fmt"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/bench"
)

func runDemo(args []string) error {
	return demoTransport()
}

// demoTransport sends frames between two TCP transports and prints what
// happened and how long it took.
func demoTransport() error {
	fmt.Println("== transport: two TCP transports on loopback")
	a, b, err := bench.Pair("tcp")
	if err != nil {
		return err
	}
	defer a.Close()
	defer b.Close()
	fmt.Printf("node A %s (worker %s) at %s\n", a.ID, a.ID.WorkerID(), a.Info.Address["tcp"])
	fmt.Printf("node B %s (worker %s) at %s\n", b.ID, b.ID.WorkerID(), b.Info.Address["tcp"])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	start := time.Now()
	if _, err := a.T.Send(b.ID, ext.Frame{Type: ext.Message, Header: []byte("hello"), Payload: []byte("from A")}); err != nil {
		return err
	}
	m, err := b.Adapter.Messages().Pop(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("B received %q/%q in %v (first send dials the connection)\n", m.Header, m.Payload, time.Since(start).Round(time.Microsecond))
	m.Done()

	const n = 10000
	start = time.Now()
	for i := 0; i < n; i++ {
		if _, err := a.T.Send(b.ID, ext.Frame{Type: ext.Message, Payload: []byte("tok")}); err != nil {
			return err
		}
	}
	var batch []ext.InboundMessage
	for got := 0; got < n; {
		if batch, err = b.Adapter.Messages().PopAll(ctx, batch[:0]); err != nil {
			return err
		}
		for _, m := range batch {
			m.Done()
		}
		got += len(batch)
	}
	el := time.Since(start)
	fmt.Printf("B received %d pipelined frames in %v (%.0f frames/s)\n", n, el.Round(time.Microsecond), n/el.Seconds())

	b.Adapter.State().BeginDrain()
	if _, err := a.T.Send(b.ID, ext.Frame{Type: ext.Message, Header: []byte("late request")}); err != nil {
		return err
	}
	echo, err := a.Adapter.Shutdowns().Pop(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("B is draining: A got a ShuttingDown echo of %q\n", echo.Header)
	return nil
}
