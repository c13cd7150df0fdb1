package streaming

// The mux when a peer or a node goes: loss, close, teardown.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/streaming/internal/mux"
	"github.com/velo-go/velo/transport/tcp"
)

// killableNode is a mux node whose TCP transport the test can shut down,
// closing every connection as the kernel does for a killed process.
func killableNode(t *testing.T) (*remoteNode, *tcp.Transport) {
	t.Helper()
	msg, tr := newMessengerTCP(t)
	return muxNodeOn(t, msg), tr
}

// streamEnd is how one consumer's stream ended.
type streamEnd struct {
	err  error
	at   time.Time
	read int
}

// consumeUntilEnd reads tokens in order until the stream ends, and
// reports the end; a token out of order or repeated is an error.
func consumeUntilEnd(a *Anchor[[]byte], out chan<- streamEnd) {
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := a.Next(ctx)
		cancel()
		if err != nil {
			out <- streamEnd{err, time.Now(), i}
			return
		}
		if !bytes.Equal(v, token(i)) {
			out <- streamEnd{fmt.Errorf("token %d = %q: duplicated or reordered", i, v), time.Now(), i}
			return
		}
	}
}

// TestMuxPeerLoss: the producer's node goes away in three ways while
// streams are open and tokens in flight; every open mux stream on the
// consumer ends with ErrSenderDropped, promptly, with no token duplicated
// or reordered before the end.
func TestMuxPeerLoss(t *testing.T) {
	const streams = 16
	ways := []struct {
		name string
		kill func(p *remoteNode, tr *tcp.Transport)
	}{
		{"manager-close", func(p *remoteNode, _ *tcp.Transport) { p.sm.Close() }},
		{"connections-close", func(_ *remoteNode, tr *tcp.Transport) { tr.Shutdown() }},
		{"messenger-shutdown", func(p *remoteNode, _ *tcp.Transport) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p.msg.Shutdown(ctx)
		}},
	}
	for _, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			producer, tr := killableNode(t)
			consumer, _ := killableNode(t)
			if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
				t.Fatal(err)
			}
			ends := make(chan streamEnd, streams)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var retired []*Sender[[]byte]
			for range streams {
				a, s := muxStream(t, producer, consumer)
				// Open on the consumer: a pipelined attach whose request
				// the loss swallows never bound anything there.
				if err := s.Ready(ctx); err != nil {
					t.Fatal(err)
				}
				retired = append(retired, s)
				go consumeUntilEnd(a, ends)
				go func() { // sends until the stream fails
					for i := 0; ctx.Err() == nil; i++ {
						if s.Send(ctx, token(i)) != nil {
							return
						}
					}
				}()
			}
			testwait.Until(t, "tokens to flow", func() bool { return muxOf(t, consumer).N.RecordsRecv.Load() > 10*streams })
			killed := time.Now()
			way.kill(producer, tr)
			var worst time.Duration
			for range streams {
				select {
				case e := <-ends:
					if !errors.Is(e.err, ErrSenderDropped) {
						t.Fatalf("a stream ended with %v after %d tokens, want ErrSenderDropped", e.err, e.read)
					}
					worst = max(worst, e.at.Sub(killed))
				case <-time.After(30 * time.Second):
					t.Fatal("an open stream did not end after its producer's node went away")
				}
			}
			t.Logf("%s: the last of %d streams ended %v after the loss", way.name, streams, worst)
			if worst > 100*time.Millisecond {
				t.Errorf("the last stream ended %v after the loss, want within 100ms", worst)
			}
			// The producer hears of the loss too: by the messenger's peer
			// loss, by a refused batch, or at the latest by the batcher's
			// health check, once per heartbeat window (a node whose own
			// transport shut down is not told of a peer loss).
			for _, s := range retired {
				select {
				case <-s.Cancelled():
				case <-time.After(2*defaultHeartbeatInterval + 2*time.Second):
					t.Fatal("a producer was not cancelled by the loss")
				}
			}
			if way.name != "manager-close" {
				return
			}
			for _, s := range retired { // the producer's node tore down: its output is lost
				s.Finalize()
				if out := retiredOutcome(t, s.Retired(), s); out != RetireDiscarded {
					t.Fatalf("retired %v after the producer's Manager closed, want Discarded", out)
				}
			}
		})
	}
}

// TestMuxConsumerNodeClose: the consumer's Manager closes while its
// messenger stays up; the producers hear of it at once (Cancelled), a
// Send waiting for credit fails with ErrCancelled, and an idle producer
// is cancelled too, even one whose OpenSlot reaches the consumer only
// after its mux closed.
func TestMuxConsumerNodeClose(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 2})
	_, busy := muxStream(t, producer, consumer)
	_, idle := muxStream(t, producer, consumer)
	fill(t, busy, 0, 5)
	blocked := sendAsync(busy, context.Background(), token(5))
	testwait.Until(t, "the Send to wait", func() bool { _, _, w := slotState(busy.slot()); return w })
	closed := time.Now()
	consumer.sm.Close()
	for _, s := range []*Sender[[]byte]{busy, idle} {
		select {
		case <-s.Cancelled():
		case <-time.After(5 * time.Second):
			t.Fatalf("the producer did not hear that its consumer's node closed (busy: %v)", s == busy)
		}
	}
	t.Logf("producers cancelled %v after the consumer's Manager closed", time.Since(closed))
	select {
	case err := <-blocked:
		if !errors.Is(err, ErrCancelled) {
			t.Fatalf("the waiting Send ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Send did not end")
	}
}

// TestMuxTeardown: after streams end every way (Finalize, Close, the
// consumer's cancel, Detach then Finalize), no slot is live on either
// side; closing both Managers stops every batcher and the sweepers.
func TestMuxTeardown(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	ctx := context.Background()
	for way := range 4 {
		a, s := muxStream(t, producer, consumer)
		fill(t, s, 0, 3)
		readTokens(t, a, 0, 3, 5*time.Second)
		var want error
		switch way {
		case 0:
			s.Finalize()
			want = io.EOF
		case 1:
			s.Close()
			want = ErrSenderDropped
		case 2:
			a.Controller().Cancel()
			select {
			case <-s.Cancelled():
			case <-time.After(5 * time.Second):
				t.Fatal("cancel did not reach the producer")
			}
			want = ErrCancelled
		case 3:
			s.Detach()
			testwait.Until(t, "the detach to land", func() bool {
				s2, err := attachReady(ctx, producer.sm, a.Handle())
				if err != nil {
					return false
				}
				s2.Finalize()
				return true
			})
			want = io.EOF
		}
		if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, want) {
			t.Fatalf("way %d: want %v, got %v", way, want, err)
		}
		a.Close()
	}
	pm, cm := muxOf(t, producer), muxOf(t, consumer)
	for _, mx := range []*mux.Mux{pm, cm} {
		testwait.Until(t, "no live slot", func() bool { out, in := mx.LiveSlots(); return out == 0 && in == 0 })
		// Closes that cross a stream's own end are the ordinary race of a
		// retired generation: dropped, not counted as refused.
		if n := mx.N.ControlRefused.Load(); n != 0 {
			t.Errorf("control refused %d times on ordinary stream ends", n)
		}
	}
	bs := append(pm.AllBatchers(), cm.AllBatchers()...)
	if len(bs) == 0 {
		t.Fatal("no batcher to watch")
	}
	producer.sm.Close()
	consumer.sm.Close()
	for _, b := range bs {
		select {
		case <-b.Done:
		case <-time.After(5 * time.Second):
			t.Fatal("a batcher's goroutine outlived its Manager")
		}
	}
	for _, mx := range []*mux.Mux{pm, cm} {
		if n := len(mx.AllBatchers()); n != 0 {
			t.Fatalf("%d batchers after close", n)
		}
		if out, in := mx.LiveSlots(); out != 0 || in != 0 {
			t.Fatalf("live slots %d out, %d in after close", out, in)
		}
	}
}
