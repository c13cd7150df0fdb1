package messenger

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/msgwire"
)

// settledResuming is the table's count of replies not taken once every
// delivery that was under way has finished, and how many slots still hold
// a call: deliverLocked adds its reply to the count under the slot's
// lock, after the send that may already have woken the caller, so a
// caller can return before the count saw its reply arrive. Taking each
// slot's lock once waits for such a delivery.
func settledResuming(t *slotTable) (resuming int64, busy int) {
	for i := range t.fresh.Load() {
		if s := t.at(i); s != nil {
			s.mu.Lock()
			if s.busy {
				busy++
			}
			s.mu.Unlock()
		}
	}
	return t.resuming.Load(), busy
}

// The count of replies that wait for their caller (slotTable.resuming,
// which marks requests ext.Frame.Follows while above zero) is back at 0
// once a mixed workload has ended: calls answered, calls that time out
// (some with the answer racing the deadline), calls cancelled, calls
// answered twice (a forged reply first, the real one late or as a
// duplicate), asynchronous calls, calls to this node itself, calls failed
// by the loss of their peer, and calls failed by this node's shutdown. A
// count left above 0 would send every later request through the writer
// goroutine instead of an inline write; one below 0 would turn the hint
// off. Fails if any path that delivers or drops a reply in a waiting
// caller's channel forgets the count (for instance, freeLocked's drain of
// a reply its caller gave up on).
func TestResumingBackToZeroAfterMixedCalls(t *testing.T) {
	caller, server := internalPair(t)
	gone := internalMessenger(t)
	if err := caller.RegisterPeer(gone.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	const toGone, atShutdown = 6, 6
	goneStarted, lastStarted := make(chan struct{}, toGone), make(chan struct{}, atShutdown)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	hold := func(c *Context) ([]byte, error) {
		select {
		case <-c.Context().Done():
		case <-release:
		}
		return c.Payload, nil
	}
	// holdAndTell is hold that says on started when it begins: by then the
	// call's slot is busy and its caller waits, or is about to.
	holdAndTell := func(started chan<- struct{}) func(*Context) ([]byte, error) {
		return func(c *Context) ([]byte, error) {
			started <- struct{}{}
			return hold(c)
		}
	}
	echo := func(c *Context) ([]byte, error) { return c.Payload, nil }
	var forged atomic.Int64
	// dup answers the caller itself, through the path a reply read off a
	// connection takes, before its real answer goes: the real one then
	// finds the reply already in the slot's channel (a duplicate) or the
	// slot moved on (late).
	dup := func(c *Context) ([]byte, error) {
		if c.sender == caller.wid {
			caller.complete(msgwire.ResponseID{Lo: uint64(caller.wid), Hi: c.token}, reply{payload: []byte("forged")})
			forged.Add(1)
		}
		return c.Payload, nil
	}
	for _, reg := range []struct {
		m *Messenger
		h Handler
	}{
		{server, UnaryHandler("echo", echo)},
		{server, UnaryHandler("hold", hold)},
		{server, UnaryHandler("dup", dup)},
		{caller, UnaryHandler("self-echo", echo)},
		{caller, UnaryHandler("self-hold", hold)},
		{gone, UnaryHandler("hold", holdAndTell(goneStarted))},
		{server, UnaryHandler("hold-last", holdAndTell(lastStarted))},
	} {
		if err := reg.m.Register(reg.h); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The handshakes first, so the timed calls time out in their waits.
	if _, err := caller.Unary(ctx, server.InstanceID(), "echo", []byte("warm")); err != nil {
		t.Fatal(err)
	}
	if _, err := caller.Unary(ctx, caller.InstanceID(), "self-echo", []byte("warm")); err != nil {
		t.Fatal(err)
	}

	var (
		answered, timedOut, canceled, lost atomic.Int64
		asyncs                             sync.WaitGroup
	)
	tally := func(err error) {
		switch {
		case err == nil:
			answered.Add(1)
		case errors.Is(err, ErrRequestTimeout):
			timedOut.Add(1)
		case errors.Is(err, context.Canceled):
			canceled.Add(1)
		default:
			lost.Add(1)
		}
	}
	within := func(d time.Duration) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, d)
	}
	srv, self := server.InstanceID(), caller.InstanceID()
	const workers, rounds = 8, 120
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				switch (w + i) % 9 {
				case 0:
					_, err := caller.Unary(ctx, srv, "echo", []byte("a"))
					tally(err)
				case 1: // the answer races the deadline
					c, stop := within(time.Duration(i%7) * 20 * time.Microsecond)
					_, err := caller.Unary(c, srv, "echo", []byte("b"))
					stop()
					tally(err)
				case 2:
					c, stop := within(time.Millisecond)
					_, err := caller.Unary(c, srv, "hold", []byte("c"))
					stop()
					tally(err)
				case 3:
					c, stop := context.WithCancel(ctx)
					time.AfterFunc(time.Duration(i%5)*50*time.Microsecond, stop)
					_, err := caller.Unary(c, srv, "hold", []byte("d"))
					stop()
					tally(err)
				case 4:
					_, err := caller.Unary(ctx, srv, "dup", []byte("e"))
					tally(err)
				case 5:
					asyncs.Add(1)
					c, stop := within(time.Duration(i%3) * 300 * time.Microsecond)
					if err := caller.UnaryAsync(c, srv, "echo", []byte("f"), func(_ []byte, err error) {
						stop()
						tally(err)
						asyncs.Done()
					}); err != nil {
						stop()
						tally(err)
						asyncs.Done()
					}
				case 6:
					_, err := caller.Unary(ctx, self, "self-echo", []byte("g"))
					tally(err)
				case 7:
					c, stop := within(time.Duration(i%4) * 100 * time.Microsecond)
					_, err := caller.Unary(c, self, "self-hold", []byte("h"))
					stop()
					tally(err)
				case 8:
					c, stop := within(time.Duration(i%6) * 30 * time.Microsecond)
					_, err := caller.Unary(c, srv, "dup", []byte("i"))
					stop()
					tally(err)
				}
			}
		}()
	}

	// Calls to a peer that goes away: they wait in its handler until the
	// loss of the peer fails them (what a transport reports when its
	// connections to the peer end).
	var goneCalls sync.WaitGroup
	for range toGone {
		goneCalls.Add(1)
		go func() {
			defer goneCalls.Done()
			_, err := caller.Unary(ctx, gone.InstanceID(), "hold", []byte("j"))
			tally(err)
		}()
	}
	for range toGone {
		<-goneStarted
	}
	caller.onPeerLost(gone.InstanceID(), errors.New("test: the peer's connections ended"))
	goneCalls.Wait()
	wg.Wait()
	asyncs.Wait()

	if n, busy := settledResuming(caller.slots); n != 0 || busy != 0 {
		t.Fatalf("after the workload (%d answered, %d timed out, %d cancelled, %d failed, %d forged replies): %d replies counted as waiting for their caller, want 0 (%d slots busy)",
			answered.Load(), timedOut.Load(), canceled.Load(), lost.Load(), forged.Load(), n, busy)
	}
	if timedOut.Load() == 0 || lost.Load() < toGone || forged.Load() == 0 || answered.Load() == 0 {
		t.Fatalf("the workload missed a path: %d answered, %d timed out, %d cancelled, %d failed, %d forged replies",
			answered.Load(), timedOut.Load(), canceled.Load(), lost.Load(), forged.Load())
	}

	// Calls that this node's shutdown fails while they wait.
	var last sync.WaitGroup
	for range atShutdown {
		last.Add(1)
		go func() {
			defer last.Done()
			_, err := caller.Unary(ctx, srv, "hold-last", []byte("k"))
			if err == nil {
				t.Error("a call held by its handler was answered before the release")
			}
		}()
	}
	for range atShutdown {
		<-lastStarted
	}
	done := make(chan error, 1)
	go func() { done <- shutdownWithin(caller, 10*time.Second) }()
	last.Wait()
	unblock()
	<-done
	if n, busy := settledResuming(caller.slots); n != 0 || busy != 0 {
		t.Fatalf("after the shutdown failed %d waiting calls: %d replies counted as waiting for their caller, want 0 (%d slots busy)", atShutdown, n, busy)
	}
}
