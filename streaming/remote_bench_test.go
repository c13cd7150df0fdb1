package streaming

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// BenchmarkRemoteRecord: 40-byte byte items from one node to an anchor on
// another, over the per-stream connection, the consumer on its own
// goroutine. ns/op is per item, end to end.
func BenchmarkRemoteRecord(b *testing.B) {
	producer, consumer := benchNodes(b)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 40)
	done := make(chan error, 1)
	b.ResetTimer()
	go func() {
		for {
			if _, err := a.NextBytes(ctx); err != nil {
				if err == io.EOF {
					err = nil
				}
				done <- err
				return
			}
		}
	}()
	for range b.N {
		if err := s.SendBytes(ctx, payload); err != nil {
			b.Fatal(err)
		}
	}
	s.Finalize()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func benchNodes(b *testing.B) (producer, consumer *remoteNode) {
	mk := func() *remoteNode {
		tr, err := tcp.New()
		if err != nil {
			b.Fatal(err)
		}
		msg, err := messenger.New(context.Background(), messenger.Config{Transports: []ext.Transport{tr}})
		if err != nil {
			b.Fatal(err)
		}
		sm, err := NewNodeManager(msg, WithMux(MuxConfig{Disabled: true}))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			sm.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			msg.Shutdown(ctx)
		})
		return &remoteNode{msg: msg, sm: sm}
	}
	producer, consumer = mk(), mk()
	if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		b.Fatal(err)
	}
	return producer, consumer
}
