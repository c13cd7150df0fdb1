package streaming

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/framepath"
)

// knows registers owner with each producer, as when the handle came in a
// request; the attach's handshake introduces the producer to the owner.
func knows(t *testing.T, owner *remoteNode, producers ...*remoteNode) {
	t.Helper()
	for _, p := range producers {
		if err := p.msg.RegisterPeer(owner.msg.PeerInfo()); err != nil {
			t.Fatal(err)
		}
	}
}

func attachMPSCRemoteT(t *testing.T, producer *remoteNode, h wire.AnchorHandle) *MPSCSender[[]byte] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := AttachMPSCAnchor[[]byte](ctx, producer.sm, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func nextFrameWithin(t *testing.T, an *MPSCAnchor[[]byte], d time.Duration) MPSCFrame[[]byte] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	f, err := an.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return f
}

func retiredWithin(t *testing.T, ch <-chan struct{}, s interface{ Outcome() RetireOutcome }) RetireOutcome {
	t.Helper()
	select {
	case <-ch:
		return s.Outcome()
	case <-time.After(5 * time.Second):
		t.Fatal("Retired did not resolve within 5s")
		return 0
	}
}

// TestRemoteMPSCTwoNodes: producers on two other nodes send into one
// anchor at once. Each gets its own SenderID from the owner, every item
// arrives once, tagged with its producer's id, each producer's items in
// the order it sent them, and each Detach gives that producer's Detached.
// Both outputs retire as Sent.
func TestRemoteMPSCTwoNodes(t *testing.T) {
	consumer, p1, p2 := newRemoteNode(t), newRemoteNode(t), newRemoteNode(t)
	knows(t, consumer, p1, p2)
	an := newMPSC(t, consumer.sm)
	senders := []*MPSCSender[[]byte]{attachMPSCRemoteT(t, p1, an.Handle()), attachMPSCRemoteT(t, p2, an.Handle())}
	if a, b := senders[0].SenderID(), senders[1].SenderID(); a == 0 || b == 0 || a == b {
		t.Fatalf("SenderIDs %v and %v, want two different non-zero ids", a, b)
	}
	if got := an.Senders(); got != 2 {
		t.Fatalf("Senders = %d, want 2", got)
	}
	const n = 500
	var wg sync.WaitGroup
	retired := make([]<-chan struct{}, len(senders))
	for i, s := range senders {
		retired[i] = s.Retired()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range n {
				// Each item names the producer's id, so the consumer can
				// check the tag against what the producer was given.
				if err := s.Send(context.Background(), fmt.Appendf(nil, "%d:%d", s.SenderID(), k)); err != nil {
					t.Errorf("send %d: %v", k, err)
					return
				}
			}
			if err := s.Detach(); err != nil {
				t.Errorf("detach: %v", err)
			}
		}()
	}
	next := map[SenderID]int{}
	for left := len(senders); left > 0; {
		f := nextFrameWithin(t, an, 10*time.Second)
		switch f.Kind {
		case MPSCItem:
			if want := fmt.Sprintf("%d:%d", f.Sender, next[f.Sender]); string(f.Item) != want {
				t.Fatalf("item %q from %v, want %q", f.Item, f.Sender, want)
			}
			next[f.Sender]++
		case MPSCDetached:
			if next[f.Sender] != n {
				t.Fatalf("%v detached after %d items, want %d", f.Sender, next[f.Sender], n)
			}
			left--
		default:
			t.Fatalf("unexpected frame %v from %v (%v)", f.Kind, f.Sender, f.Err)
		}
	}
	wg.Wait()
	for i := range senders {
		if out := retiredWithin(t, retired[i], senders[i]); out != RetireSent {
			t.Fatalf("producer %d retired %v, want Sent", i, out)
		}
	}
	if got := an.Senders(); got != 0 {
		t.Fatalf("Senders after both detached = %d, want 0", got)
	}
}

// liveConns counts the per-stream connections a Manager tracks.
func liveConns(m *Manager) int {
	return m.remote.tcp.Conns()
}

// waitNoConns waits until neither Manager tracks a connection.
func waitNoConns(t *testing.T, ms ...*Manager) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, m := range ms {
			n += liveConns(m)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d per-stream connections still open", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// streamGoroutines counts the goroutines that serve one stream: the
// owner's reader, the producer's pump and watcher.
func streamGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	c := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		// By who made them, so that one not yet started counts too.
		if strings.Contains(g, "framepath.(*Node).serve(") || strings.Contains(g, "framepath.(*Node).Open in goroutine") || strings.Contains(g, "tcpframe.newSender in goroutine") {
			c++
		}
	}
	return c
}

// waitStreamGoroutines waits until at most n stream goroutines run.
func waitStreamGoroutines(n int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := streamGoroutines()
		if got <= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRemoteMPSCChurn: a remote producer attaches, sends, detaches, again
// and again. Each round has a new SenderID and ends with its Detached;
// afterwards no connection, goroutine or remote-producer entry is left.
func TestRemoteMPSCChurn(t *testing.T) {
	producer, consumer := twoNodes(t)
	an := newMPSC(t, consumer.sm)
	// Warm up: the first attach sets up the messenger's connections.
	// A live producer costs three stream goroutines: the owner's reader,
	// the producer's pump and watcher.
	s := attachMPSCRemoteT(t, producer, an.Handle())
	if err := s.Send(context.Background(), []byte("w")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem {
		t.Fatalf("warm-up frame %v", f.Kind)
	}
	if n := streamGoroutines(); n != 3 {
		t.Fatalf("%d stream goroutines for one live producer, want 3", n)
	}
	s.Detach()
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCDetached {
		t.Fatalf("warm-up frame %v", f.Kind)
	}
	waitNoConns(t, producer.sm, consumer.sm)
	ctx := context.Background()
	last := s.SenderID()
	for round := range 30 {
		s := attachMPSCRemoteT(t, producer, an.Handle())
		if s.SenderID() <= last {
			t.Fatalf("round %d: SenderID %v after %v", round, s.SenderID(), last)
		}
		last = s.SenderID()
		for k := range 3 {
			if err := s.Send(ctx, []byte{byte(round), byte(k)}); err != nil {
				t.Fatal(err)
			}
		}
		retired := s.Retired()
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
		for k := range 3 {
			f := nextFrameWithin(t, an, 5*time.Second)
			if f.Kind != MPSCItem || f.Sender != s.SenderID() || !bytes.Equal(f.Item, []byte{byte(round), byte(k)}) {
				t.Fatalf("round %d item %d: %+v", round, k, f)
			}
		}
		if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCDetached || f.Sender != s.SenderID() {
			t.Fatalf("round %d: %+v, want Detached of %v", round, f, s.SenderID())
		}
		if out := retiredWithin(t, retired, s); out != RetireSent {
			t.Fatalf("round %d retired %v", round, out)
		}
	}
	waitNoConns(t, producer.sm, consumer.sm)
	// The messenger's pool of handler goroutines grows and shrinks on
	// its own, so count the goroutines of streams only.
	if n := waitStreamGoroutines(0); n != 0 {
		t.Fatalf("%d stream goroutines after the churn", n)
	}
	sn := an.a.State().Snapshot()
	left, senders := sn.Remotes, sn.Producers
	if left != 0 || senders != 0 {
		t.Fatalf("after the churn: %d remote entries, %d senders", left, senders)
	}
}

// TestRemoteMPSCProducerNodeCloses: one producer's node closes its
// connections (its Manager shuts down). The consumer reads that
// producer's Dropped within 100 ms, the stream goes on, and a producer on
// a third node still gets through.
func TestRemoteMPSCProducerNodeCloses(t *testing.T) {
	consumer, dying, living := newRemoteNode(t), newRemoteNode(t), newRemoteNode(t)
	knows(t, consumer, dying, living)
	an := newMPSC(t, consumer.sm)
	sd := attachMPSCRemoteT(t, dying, an.Handle())
	sl := attachMPSCRemoteT(t, living, an.Handle())
	ctx := context.Background()
	if err := sd.Send(ctx, []byte("d")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || f.Sender != sd.SenderID() {
		t.Fatalf("first frame %+v", f)
	}
	closed := time.Now()
	dying.sm.Close()
	f := nextFrameWithin(t, an, 5*time.Second)
	took := time.Since(closed)
	if f.Kind != MPSCDropped || f.Sender != sd.SenderID() {
		t.Fatalf("after the close: %+v, want Dropped of %v", f, sd.SenderID())
	}
	if took > 100*time.Millisecond {
		t.Fatalf("Dropped %v after the producer's node closed, want within 100ms", took)
	}
	for k := range 10 {
		if err := sl.Send(ctx, []byte{byte(k)}); err != nil {
			t.Fatalf("the other producer's send %d: %v", k, err)
		}
	}
	for k := range 10 {
		if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || f.Sender != sl.SenderID() || f.Item[0] != byte(k) {
			t.Fatalf("item %d of the other producer: %+v", k, f)
		}
	}
	if got := an.Senders(); got != 1 {
		t.Fatalf("Senders = %d, want 1 (the living producer)", got)
	}
	// The dead node's own sender saw its node stop.
	if err := sd.Send(ctx, []byte("late")); !errors.Is(err, ErrCancelled) {
		t.Fatalf("send after the node closed: %v", err)
	}
}

// blockedInSend waits until a remote sender's egress is full and a Send
// waits for room.
func blockedInSend(t *testing.T, rs *framepath.Stream, sendErr <-chan error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if rs.WaitingForRoom() {
			return
		}
		select {
		case err := <-sendErr:
			t.Fatalf("send ended before it blocked: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Send never blocked")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRemoteMPSCCancelReachesBlockedSend: a remote producer is blocked in
// Send (the consumer reads nothing, the inlet, the socket and the egress
// are full). The consumer's Cancel or Close reaches it: the Send returns
// ErrCancelled, Cancelled closes, and its output retires as Discarded.
func TestRemoteMPSCCancelReachesBlockedSend(t *testing.T) {
	for _, how := range []string{"Cancel", "Close"} {
		t.Run(how, func(t *testing.T) {
			producer, consumer := twoNodes(t)
			an := newMPSC(t, consumer.sm, WithCapacity(1))
			s := attachMPSCRemoteT(t, producer, an.Handle())
			retired := s.Retired()
			item := make([]byte, 32<<10)
			sendErr := make(chan error, 1)
			go func() {
				for {
					if err := s.Send(context.Background(), item); err != nil {
						sendErr <- err
						return
					}
				}
			}()
			blockedInSend(t, s.stream(), sendErr)
			if how == "Cancel" {
				an.Controller().Cancel()
			} else {
				an.Close()
			}
			select {
			case err := <-sendErr:
				if !errors.Is(err, ErrCancelled) {
					t.Fatalf("blocked Send = %v, want ErrCancelled", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the blocked Send did not return after the consumer's " + how)
			}
			select {
			case <-s.Cancelled():
			case <-time.After(5 * time.Second):
				t.Fatal("Cancelled did not close")
			}
			if err := s.Detach(); !errors.Is(err, ErrCancelled) {
				t.Fatalf("Detach after the cancel = %v, want ErrCancelled", err)
			}
			if out := retiredWithin(t, retired, s); out != RetireDiscarded {
				t.Fatalf("retired %v, want Discarded", out)
			}
			waitNoConns(t, producer.sm, consumer.sm)
		})
	}
}

// TestRemoteMPSCAttachRefused: the owner refuses an MPSC handle it does
// not know, and one whose anchor was closed, with ErrAnchorNotFound and a
// reason that names the handle; an SPSC handle sent to
// _mpsc_anchor_attach is refused too.
func TestRemoteMPSCAttachRefused(t *testing.T) {
	producer, consumer := twoNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	unknown := wire.NewMPSCAnchorHandle(consumer.msg.WorkerID(), 12345)
	_, err := AttachMPSCAnchor[[]byte](ctx, producer.sm, unknown)
	if !errors.Is(err, ErrAnchorNotFound) || !strings.Contains(err.Error(), "mpsc anchor") {
		t.Fatalf("unknown handle: %v, want ErrAnchorNotFound naming the mpsc anchor", err)
	}
	an := newMPSC(t, consumer.sm)
	an.Close()
	if _, err := AttachMPSCAnchor[[]byte](ctx, producer.sm, an.Handle()); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("closed anchor: %v, want ErrAnchorNotFound", err)
	}
	sp, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	req := wire.AttachRequest{Handle: sp.Handle(), SessionID: 1, CancelHandle: wire.NewCancelHandle(producer.msg.WorkerID(), 1)}
	body, err := producer.msg.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorAttachHandler, req.AppendJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeMPSCAttachResponse(body)
	if err != nil || !resp.Refused || !strings.Contains(resp.Reason, "spsc") {
		t.Fatalf("SPSC handle at _mpsc_anchor_attach: %+v, %v", resp, err)
	}
	if n := liveConns(producer.sm) + liveConns(consumer.sm); n != 0 {
		t.Fatalf("%d connections after refused attaches", n)
	}
}

// TestRemoteMPSCWatchdog: a remote producer that goes silent (its node
// stops beating, the connection open) is ended as that producer's Dropped
// between two and three heartbeat windows after its last frame; another
// producer goes on, and the owner neither counts it in WatchdogFirings
// nor logs it (the book: an MPSC reader does neither).
func TestRemoteMPSCWatchdog(t *testing.T) {
	var log syncBuffer
	producer, consumer := hbNodes(t, &log)
	an := newMPSC(t, consumer.sm)
	local := attachMPSC(t, consumer.sm, an.Handle())
	producer.sm.remote.tcp.PauseHeartbeats(true)
	s := attachMPSCRemoteT(t, producer, an.Handle())
	ctx := context.Background()
	if err := s.Send(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || f.Sender != s.SenderID() {
		t.Fatalf("first frame %+v", f)
	}
	last := time.Now()
	f := nextFrameWithin(t, an, 5*time.Second)
	took := time.Since(last)
	if f.Kind != MPSCDropped || f.Sender != s.SenderID() {
		t.Fatalf("after the silence: %+v, want Dropped of %v", f, s.SenderID())
	}
	if lo, hi := 2*testWindow, detectionMultiplier*testWindow+watchdogSlack; took < lo || took > hi {
		t.Fatalf("dropped %v after the last frame, want within [%v, %v]", took, lo, hi)
	}
	if n := consumer.sm.watchdogFirings(); n != 0 {
		t.Fatalf("WatchdogFirings = %d, want 0 for an MPSC producer", n)
	}
	if strings.Contains(log.String(), "watchdog") {
		t.Fatalf("the owner logged a firing for an MPSC producer:\n%s", log.String())
	}
	if err := local.Send(ctx, []byte("still")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || f.Sender != local.SenderID() {
		t.Fatalf("the other producer: %+v", f)
	}
	select {
	case <-s.Cancelled(): // the owner closed the silent producer's connection
	case <-time.After(5 * time.Second):
		t.Fatal("the silent producer did not hear that it was ended")
	}
}

// TestRemoteMPSCUnattachedTimeout: the unattached timeout does not run
// while a remote producer is attached, and starts again when it detaches,
// as on the same worker.
func TestRemoteMPSCUnattachedTimeout(t *testing.T) {
	producer, consumer := twoNodes(t)
	const timeout = 50 * time.Millisecond
	an := newMPSC(t, consumer.sm, WithUnattachedTimeout(timeout))
	s := attachMPSCRemoteT(t, producer, an.Handle())
	// Several windows pass with the producer attached: nothing ends.
	ctx, cancel := context.WithTimeout(context.Background(), 4*timeout)
	_, err := an.Next(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next while attached = %v, want the wait's own deadline", err)
	}
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCDetached {
		t.Fatalf("%+v, want Detached", f)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := an.Next(ctx); !errors.Is(err, ErrUnattachedTimeout) {
		t.Fatalf("Next after the last producer left = %v, want ErrUnattachedTimeout", err)
	}
}

// TestRemoteMPSCDetachAndCancelHandlers: _mpsc_anchor_detach ends one
// remote producer (the consumer reads its Detached, its connection
// closes) and answers null; _mpsc_anchor_cancel ends the whole anchor.
func TestRemoteMPSCDetachAndCancelHandlers(t *testing.T) {
	producer, consumer := twoNodes(t)
	an := newMPSC(t, consumer.sm)
	s1 := attachMPSCRemoteT(t, producer, an.Handle())
	s2 := attachMPSCRemoteT(t, producer, an.Handle())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dr := wire.MPSCDetachRequest{Handle: an.Handle(), SenderID: uint64(s1.SenderID())}
	body, err := producer.msg.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorDetachHandler, dr.AppendJSON(nil))
	if err != nil || string(body) != "null" {
		t.Fatalf("_mpsc_anchor_detach = %q, %v", body, err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCDetached || f.Sender != s1.SenderID() {
		t.Fatalf("%+v, want Detached of %v", f, s1.SenderID())
	}
	select {
	case <-s1.Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatal("the detached producer's connection stayed open")
	}
	cr := wire.HandleRequest{Handle: an.Handle()}
	body, err = producer.msg.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorCancelHandler, cr.AppendJSON(nil))
	if err != nil || string(body) != "null" {
		t.Fatalf("_mpsc_anchor_cancel = %q, %v", body, err)
	}
	if _, err := an.Next(ctx); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Next after _mpsc_anchor_cancel = %v", err)
	}
	select {
	case <-s2.Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatal("the other producer did not hear the cancel")
	}
	if err := s2.Send(ctx, []byte("x")); !errors.Is(err, ErrCancelled) {
		t.Fatalf("send after the cancel = %v", err)
	}
}
