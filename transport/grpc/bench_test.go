package grpc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/velo-go/velo/ext"
)

// BenchmarkPipelined sends b.N frames of each size one way and waits for
// all of them: CPU and allocations per frame, both ends together.
func BenchmarkPipelined(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			rx, tx := startTransport(b), startTransport(b)
			tx.register(b, rx)
			payload := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			done := make(chan struct{})
			go func() {
				defer close(done)
				var batch []ext.InboundMessage
				for got := 0; got < b.N; {
					var err error
					batch, err = rx.a.Messages().PopAll(context.Background(), batch[:0])
					if err != nil {
						return
					}
					got += len(batch)
					ext.DoneAll(batch)
				}
			}()
			b.ResetTimer()
			for range b.N {
				out, err := tx.tr.Send(rx.id, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: payload})
				if err != nil {
					b.Fatal(err)
				}
				out.Wait(context.Background())
			}
			<-done
		})
	}
}
