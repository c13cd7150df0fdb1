package zmq_test

import (
	"context"
	"testing"

	"github.com/velo-go/velo/ext"
)

// BenchmarkOneWay64 sends 64-byte requests from one node to another over
// loopback and counts what each costs, both ends.
func BenchmarkOneWay64(b *testing.B) {
	rx := startNode(b, ext.NewInstanceID())
	tx := startNode(b, ext.NewInstanceID())
	if err := tx.tr.Register(rx.info); err != nil {
		b.Fatal(err)
	}
	hdr, payload := make([]byte, 24), make([]byte, 40)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var batch []ext.InboundMessage
		for got := 0; got < b.N; {
			var err error
			if batch, err = rx.adapter.Messages().PopAll(context.Background(), batch[:0]); err != nil {
				return
			}
			got += len(batch)
			ext.DoneAll(batch)
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := tx.tr.Send(rx.id, ext.Frame{Type: ext.Message, Header: hdr, Payload: payload})
		if err != nil {
			b.Fatal(err)
		}
		out.Wait(context.Background())
	}
	<-done
}
