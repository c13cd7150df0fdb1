package ucx

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/velo-go/velo/ext"
)

func TestIdleRules(t *testing.T) {
	const s = int64(time.Second)
	for _, c := range []struct {
		now, last, inflight, gets int64
		want                      bool
	}{
		{2 * s, s, 0, 0, true},        // exactly one timeout idle
		{2*s - 1, s, 0, 0, false},     // not yet
		{10 * s, s, 1, 0, false},      // a send in flight
		{10 * s, s, 0, 1, false},      // a GET outstanding
		{10 * s, 11 * s, 0, 0, false}, // stamped after now (a race of clocks)
	} {
		if got := idleFor(c.now, c.last, c.inflight, c.gets, time.Second); got != c.want {
			t.Errorf("idleFor(%+v) = %v", c, got)
		}
	}
	if reapPeriod(10*time.Second) != time.Second || reapPeriod(MinIdleTimeout) != 250*time.Millisecond {
		t.Fatal("scan period: half the timeout, at least once a second")
	}
	o := options{idleTimeout: 100 * time.Millisecond}
	if o.defaults(); o.idleTimeout != MinIdleTimeout {
		t.Fatalf("a 100 ms timeout became %v, want the 500 ms floor", o.idleTimeout)
	}
	o = options{}
	if o.defaults(); o.idleTimeout != 0 {
		t.Fatal("the reaper is on by default")
	}
}

// The slots keep 8 distinct senders; a ninth sets the overflow flag,
// which stamps every endpoint.
func TestSenderSlots(t *testing.T) {
	var s senderSlots
	if !s.empty() {
		t.Fatal("new slots not empty")
	}
	for i := range 8 {
		s.note(uint64(i + 1))
		s.note(uint64(i + 1))
	}
	if s.overflow || len(s.senders()) != 8 {
		t.Fatalf("8 senders: %v, overflow %v", s.senders(), s.overflow)
	}
	s.note(9)
	if !s.overflow {
		t.Fatal("a ninth sender did not overflow")
	}
}

// reapPair is a sender a registered on b, inside a synctest bubble.
func reapPair(t *testing.T, opts ...Option) (a, b *node) {
	net := newFakeNet()
	a = startNode(t, newFake(t, net, append([]Option{WithEndpointIdleTimeout(time.Second)}, opts...)...))
	b = startNode(t, newFake(t, net))
	a.register(t, b)
	return a, b
}

func sendOne(t *testing.T, from, to *node) {
	t.Helper()
	if _, err := from.tr.Send(to.id, ext.Frame{Type: ext.Event, Header: []byte("h"), Payload: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	f, err := to.adapter.Events().Pop(context.Background())
	if err != nil || string(f.Header) != "h" {
		t.Fatalf("frame: %q, %v", f.Header, err)
	}
}

// An endpoint nothing uses closes between one timeout and one timeout
// plus a scan period after its last use; the peer stays registered and
// the next send wires up a new endpoint.
func TestReaperClosesIdleEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := reapPair(t)
		sendOne(t, a, b)
		synctest.Wait()
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		if a.tr.Stats().Reaped != 0 || a.tr.fake().liveEPs() != 1 {
			t.Fatalf("reaped before one timeout: %+v", a.tr.Stats())
		}
		time.Sleep(reapPeriod(time.Second) + time.Millisecond)
		synctest.Wait()
		if a.tr.Stats().Reaped != 1 || a.tr.fake().liveEPs() != 0 {
			t.Fatalf("not reaped within timeout plus a period: %+v, %d endpoints", a.tr.Stats(), a.tr.fake().liveEPs())
		}
		sendOne(t, a, b)
		if n := a.tr.fake().connects.Load(); n != 2 {
			t.Fatalf("%d connects, want a second after the reap", n)
		}
	})
}

// Off by default: an endpoint stays open however long it idles.
func TestReaperOffByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := newFakeNet()
		a, b := startNode(t, newFake(t, net)), startNode(t, newFake(t, net))
		a.register(t, b)
		sendOne(t, a, b)
		time.Sleep(time.Hour)
		synctest.Wait()
		if a.tr.fake().liveEPs() != 1 || a.tr.Stats().Reaped != 0 {
			t.Fatal("an endpoint closed with the reaper off")
		}
	})
}

// Frames the peer sends us stamp our endpoint to it (by the incarnation
// in their headers), though we send nothing: it stays open while they
// come and closes once they stop.
func TestReaperCountsInboundFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := reapPair(t)
		b.register(t, a)
		sendOne(t, a, b) // a's endpoint to b
		for range 10 {
			time.Sleep(400 * time.Millisecond)
			sendOne(t, b, a)
		}
		synctest.Wait()
		if a.tr.Stats().Reaped != 0 {
			t.Fatal("reaped an endpoint whose peer kept sending to us")
		}
		time.Sleep(1500*time.Millisecond + time.Millisecond)
		synctest.Wait()
		if a.tr.Stats().Reaped != 1 {
			t.Fatal("not reaped after the peer stopped sending")
		}
	})
}

// A send in flight keeps the endpoint open, however long; its completion
// restarts the idle clock.
func TestReaperWaitsForSendsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := reapPair(t)
		sendOne(t, a, b)
		a.tr.fake().setHold(true)
		if _, err := a.tr.Send(b.id, ext.Frame{Type: ext.Event, Header: []byte("held")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if a.tr.Stats().Reaped != 0 {
			t.Fatal("reaped an endpoint with a send in flight")
		}
		a.tr.fake().setHold(false)
		synctest.Wait()
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		if a.tr.Stats().Reaped != 0 {
			t.Fatal("the completion did not restart the idle clock")
		}
		time.Sleep(reapPeriod(time.Second) + time.Millisecond)
		synctest.Wait()
		if a.tr.Stats().Reaped != 1 {
			t.Fatal("not reaped after the send completed")
		}
	})
}

// A GET outstanding keeps the endpoint open; its completion restarts the
// clock.
func TestReaperWaitsForGets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := reapPair(t)
		mem := make([]byte, 64)
		copy(mem, "owner's bytes")
		m, err := b.tr.RDMA().Map(unsafe.Pointer(&mem[0]), len(mem))
		if err != nil {
			t.Fatal(err)
		}
		key, _ := m.PackKey()
		base, _ := m.EffectiveRange()
		hold := make(chan struct{})
		a.tr.fake().getHold = hold
		got := make(chan error, 1)
		dst := make([]byte, 13)
		go func() { got <- a.tr.RDMA().Get(context.Background(), b.id.WorkerID(), uint64(base), key, dst) }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if a.tr.Stats().Reaped != 0 {
			t.Fatal("reaped an endpoint with a GET outstanding")
		}
		close(hold)
		if err := <-got; err != nil || string(dst) != "owner's bytes" {
			t.Fatalf("GET: %q, %v", dst, err)
		}
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		if a.tr.Stats().Reaped != 0 {
			t.Fatal("the GET's completion did not restart the clock")
		}
		time.Sleep(reapPeriod(time.Second) + time.Millisecond)
		synctest.Wait()
		if a.tr.Stats().Reaped != 1 {
			t.Fatal("not reaped after the GET")
		}
		m.Unmap()
	})
}

// More than 8 senders between two drains stamp every endpoint: none of
// their stamps is lost.
func TestReaperOverflowStampsAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := reapPair(t)
		sendOne(t, a, b)
		l := a.tr.peer(b.id).link
		before := l.lastUse.Load()
		time.Sleep(300 * time.Millisecond)
		var s senderSlots
		for i := range 9 {
			s.note(uint64(1000 + i)) // none of them is b
		}
		a.tr.stampSenders(&s)
		if l.lastUse.Load() <= before {
			t.Fatal("an overflow of the slots did not stamp every endpoint")
		}
		s = senderSlots{}
		s.note(12345)
		stamp := l.lastUse.Load()
		time.Sleep(300 * time.Millisecond)
		a.tr.stampSenders(&s)
		if l.lastUse.Load() != stamp {
			t.Fatal("another sender stamped b's endpoint")
		}
	})
}

// With eager wireup, Register creates the endpoint at once (in the
// background); with the reaper on too, an endpoint never used closes
// about one timeout after it was created.
func TestEagerWireup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := reapPair(t, WithEagerEndpoints(true))
		synctest.Wait()
		if a.tr.fake().connects.Load() != 1 || a.tr.fake().liveEPs() != 1 {
			t.Fatalf("%d connects at register, want 1", a.tr.fake().connects.Load())
		}
		time.Sleep(time.Second + reapPeriod(time.Second) + time.Millisecond)
		synctest.Wait()
		if a.tr.Stats().Reaped != 1 {
			t.Fatal("the unused eager endpoint was not reaped")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		net := newFakeNet()
		a, b := startNode(t, newFake(t, net)), startNode(t, newFake(t, net))
		a.register(t, b)
		synctest.Wait()
		if a.tr.fake().connects.Load() != 0 {
			t.Fatal("an endpoint was created at register without eager wireup")
		}
	})
}
