package streaming

import (
	"context"
	"sync"
	"testing"
)

// BenchmarkMuxForwardPass is the response plane's shape between two nodes:
// each op is one forward pass that puts one 40-byte token on each of 64
// streams; one goroutine per stream reads. It reports the cost per token
// (whole process, both ends).
func BenchmarkMuxForwardPass(b *testing.B) {
	const streams = 64
	producer, consumer := benchMuxNodes(b)
	ctx := context.Background()
	payload := []byte("a forty-byte token of a response stream.")
	var senders []*Sender[[]byte]
	var wg sync.WaitGroup
	passes := b.N
	for range streams {
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			b.Fatal(err)
		}
		s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
		if err != nil {
			b.Fatal(err)
		}
		senders = append(senders, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range passes {
				if _, err := a.NextBytes(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range passes {
		for _, s := range senders {
			if err := s.SendBytes(ctx, payload); err != nil {
				b.Fatal(err)
			}
		}
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(passes*streams), "ns/token")
	for _, s := range senders {
		s.Close()
	}
}

func benchMuxNodes(b *testing.B) (producer, consumer *remoteNode) {
	mk := func() *remoteNode {
		msg := newMessenger(b)
		sm, err := NewNodeManager(msg, WithMux(MuxConfig{}))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sm.Close() })
		return &remoteNode{msg: msg, sm: sm}
	}
	producer, consumer = mk(), mk()
	if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		b.Fatal(err)
	}
	return producer, consumer
}

// BenchmarkMuxStreamSetup is one short stream between two nodes over the
// mux: create an anchor, attach (or open a ticket), send a token,
// finalize, read to the end. It reports the cost of setting a stream up.
func BenchmarkMuxStreamSetup(b *testing.B) {
	producer, consumer := benchMuxNodes(b)
	ctx := context.Background()
	payload := []byte("a forty-byte token of a response stream.")
	for _, zeroRTT := range []bool{false, true} {
		b.Run(map[bool]string{false: "attach", true: "ticket"}[zeroRTT], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a, err := CreateAnchor[[]byte](consumer.sm)
				if err != nil {
					b.Fatal(err)
				}
				var s *Sender[[]byte]
				if zeroRTT {
					tk, err := consumer.sm.PrebindAnchor(a.Handle())
					if err != nil {
						b.Fatal(err)
					}
					s, err = OpenAnchorStream[[]byte](ctx, producer.sm, a.Handle(), tk)
					if err != nil {
						b.Fatal(err)
					}
				} else if s, err = AttachAnchor[[]byte](ctx, producer.sm, a.Handle()); err != nil {
					b.Fatal(err)
				}
				s.SendBytes(ctx, payload)
				s.Finalize()
				for {
					if _, err := a.NextBytes(ctx); err != nil {
						break
					}
				}
				a.Close()
			}
		})
	}
}
