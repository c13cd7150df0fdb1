package streaming

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
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
	m.remote.mu.Lock()
	defer m.remote.mu.Unlock()
	return len(m.remote.conns)
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
		if strings.Contains(g, "streaming.(*remote).serve(") || strings.Contains(g, "streaming.(*remote).openStream in goroutine") {
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
	an.a.st.mu.Lock()
	left, senders := len(an.a.remotes), an.a.senders
	an.a.st.mu.Unlock()
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
func blockedInSend(t *testing.T, rs *remoteSender, sendErr <-chan error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rs.mu.Lock()
		w := rs.spaceWait != nil
		rs.mu.Unlock()
		if w {
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
	producer.sm.remote.hb.paused.Store(true)
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

// TestRemoteMPSCProducerWireGolden: what a remote MPSC producer puts on
// the wire, byte for byte, against an owner played by hand: the attach
// goes to _mpsc_anchor_attach, the connection starts with the SPSC
// preamble (the local id with its MPSC bit, the routing session), and the
// frames are plain stream frames, with no SenderID.
func TestRemoteMPSCProducerWireGolden(t *testing.T) {
	producer := newRemoteNode(t)
	owner := newMessenger(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ap := ln.Addr().(*net.TCPAddr)
	ep := tcp.EncodeEndpoint([]tcp.Interface{{IP: "127.0.0.1", Port: uint16(ap.Port), PrefixLen: 32}})
	if err := msgrx.AdvertiseAddress(owner, wire.TCPStreamKey, ep); err != nil {
		t.Fatal(err)
	}
	msgrx.RegisterSystem(owner, messenger.UnaryHandler(wire.MPSCAnchorAttachHandler, func(c *messenger.Context) ([]byte, error) {
		return []byte(`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":5000,"sender_id":7,"routing_session_id":72623859790382856}}`), nil
	}))
	connect(t, producer.msg, owner)
	h := wire.NewMPSCAnchorHandle(owner.WorkerID(), 0x1122334455667788)
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	s := attachMPSCRemoteT(t, producer, h)
	if s.SenderID() != 7 {
		t.Fatalf("SenderID = %v, want the owner's 7", s.SenderID())
	}
	s.Send(context.Background(), []byte("hi"))
	s.Detach()
	want := []byte{
		0x91, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // local id, MPSC bit set
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // routing session id
		0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, // schema 1, Message, header 0, payload 10
		0x81, 0xa4, 'I', 't', 'e', 'm', 0xc4, 0x02, 'h', 'i',
		0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09,
		0xa8, 'D', 'e', 't', 'a', 'c', 'h', 'e', 'd',
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatalf("connection bytes\n got % x\nwant % x", b, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the producer did not close the connection after Detach")
	}
}

// TestRemoteMPSCOwnerWireGolden: the owner, driven by hand-written bytes
// as a producer of the reference would send them: the attach answer's
// exact JSON, then a connection whose frames the consumer reads tagged
// with the SenderID that the answer gave.
func TestRemoteMPSCOwnerWireGolden(t *testing.T) {
	consumer := newRemoteNode(t)
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	an := newMPSC(t, consumer.sm)
	h := an.Handle()
	body := fmt.Appendf(nil, `{"handle":{"hi":%d,"lo":%d},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5}}`, h.Hi, h.Lo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	answer, err := raw.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorAttachHandler, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeMPSCAttachResponse(answer)
	if err != nil || resp.RoutingSessionID == 0 {
		t.Fatalf("answer %s: %+v, %v", answer, resp, err)
	}
	want := fmt.Sprintf(`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":5000,"sender_id":1,"routing_session_id":%d,"initial_credit":0,"slot_byte_budget":0}}`, resp.RoutingSessionID)
	if string(answer) != want {
		t.Fatalf("answer\n got %s\nwant %s", answer, want)
	}
	c, err := net.Dial("tcp", consumer.sm.streamAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := wire.TCPPreamble{AnchorID: h.LocalID(), SessionID: resp.RoutingSessionID}.Append(nil)
	b = append(b, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09,
		0x81, 0xa4, 'I', 't', 'e', 'm', 0xc4, 0x01, 'a')
	b = append(b, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a,
		0xa9, 'F', 'i', 'n', 'a', 'l', 'i', 'z', 'e', 'd') // read as Detached
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || f.Sender != 1 || string(f.Item) != "a" {
		t.Fatalf("%+v, want item a of SenderID(1)", f)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCDetached || f.Sender != 1 {
		t.Fatalf("%+v, want Detached of SenderID(1): a producer cannot finalize", f)
	}
	if got := an.Senders(); got != 0 {
		t.Fatalf("Senders = %d, want 0", got)
	}
}

// TestRemoteMPSCNeverConnects: a producer that attaches and never
// connects is counted, then dropped after three heartbeat windows (the
// reference's reader watches heartbeats from the attach), and the stream
// goes on.
func TestRemoteMPSCNeverConnects(t *testing.T) {
	producer, consumer := hbNodes(t, nil)
	an := newMPSC(t, consumer.sm)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msgrx.Handshake(producer.msg, ctx, consumer.msg.InstanceID()); err != nil {
		t.Fatal(err)
	}
	req := wire.AttachRequest{Handle: an.Handle(), SessionID: 1, CancelHandle: wire.NewCancelHandle(producer.msg.WorkerID(), 1)}
	start := time.Now()
	body, err := producer.msg.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorAttachHandler, req.AppendJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeMPSCAttachResponse(body)
	if err != nil || resp.Refused || resp.SenderID != 1 {
		t.Fatalf("attach answer %+v, %v", resp, err)
	}
	if got := an.Senders(); got != 1 {
		t.Fatalf("Senders = %d, want 1 (counted at the answer)", got)
	}
	f := nextFrameWithin(t, an, 5*time.Second)
	took := time.Since(start)
	if f.Kind != MPSCDropped || f.Sender != 1 {
		t.Fatalf("%+v, want Dropped of SenderID(1)", f)
	}
	if lo, hi := detectionMultiplier*testWindow, detectionMultiplier*testWindow+watchdogSlack; took < lo || took > hi {
		t.Fatalf("dropped %v after the attach, want within [%v, %v]", took, lo, hi)
	}
	if got := an.Senders(); got != 0 {
		t.Fatalf("Senders = %d, want 0", got)
	}
}

// TestRemoteMPSCDialFailsReleases: the attach is answered but the
// producer cannot reach the owner's stream listener. The producer tells
// the owner (_mpsc_anchor_detach), so the consumer reads that producer's
// Detached at once, not after the owner's connect window (15 s here).
func TestRemoteMPSCDialFailsReleases(t *testing.T) {
	producer, consumer := newRemoteNode(t), newRemoteNode(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().(*net.TCPAddr)
	ln.Close() // nothing listens there now: the dial is refused
	info := consumer.msg.PeerInfo()
	addr := make(ext.WorkerAddress, len(info.Address)+1) // a copy: the messenger's own stays
	for k, v := range info.Address {
		addr[k] = v
	}
	info.Address = addr
	info.Address[wire.TCPStreamKey] = tcp.EncodeEndpoint([]tcp.Interface{{IP: "127.0.0.1", Port: uint16(dead.Port), PrefixLen: 32}})
	if err := producer.msg.RegisterPeer(info); err != nil {
		t.Fatal(err)
	}
	an := newMPSC(t, consumer.sm)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := AttachMPSCAnchor[[]byte](ctx, producer.sm, an.Handle()); err == nil || !strings.Contains(err.Error(), "dial") {
		t.Fatalf("attach = %v, want the dial's error", err)
	}
	f := nextFrameWithin(t, an, 5*time.Second)
	if f.Kind != MPSCDetached || f.Sender != 1 {
		t.Fatalf("%+v, want Detached of SenderID(1)", f)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("released %v after the attach, want well within the 15 s connect window", took)
	}
	if got := an.Senders(); got != 0 {
		t.Fatalf("Senders = %d, want 0", got)
	}
}

// TestRemoteMPSCHeartbeatKeepsIdleProducer: a remote producer that sends
// nothing for several heartbeat windows is kept alive by its node's
// heartbeats, and its next item arrives.
func TestRemoteMPSCHeartbeatKeepsIdleProducer(t *testing.T) {
	producer, consumer := hbNodes(t, nil)
	an := newMPSC(t, consumer.sm)
	s := attachMPSCRemoteT(t, producer, an.Handle())
	// Twice the detection time with nothing but heartbeats: the consumer
	// must see nothing at all (no Dropped).
	ctx, cancel := context.WithTimeout(context.Background(), 2*detectionMultiplier*testWindow)
	f, err := an.Next(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next while the producer idles = %+v, %v; want the wait's own deadline", f, err)
	}
	if err := s.Send(context.Background(), []byte("late")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || string(f.Item) != "late" {
		t.Fatalf("%+v, want the late item", f)
	}
	if n := producer.sm.remote.hb.beats.Load(); n == 0 {
		t.Fatal("no heartbeat was sent")
	}
}

// TestRemoteMPSCStop: a consumer's RequestStop reaches producers on other
// nodes (one attached before the stop, one after, which finds it kept);
// each answers with a final item and detaches, and the stream goes on
// until the consumer ends it.
func TestRemoteMPSCStop(t *testing.T) {
	consumer, p1, p2 := newRemoteNode(t), newRemoteNode(t), newRemoteNode(t)
	knows(t, consumer, p1, p2)
	an := newMPSC(t, consumer.sm)
	early := attachMPSCRemoteT(t, p1, an.Handle())
	an.Controller().RequestStop()
	late := attachMPSCRemoteT(t, p2, an.Handle())
	for _, s := range []*MPSCSender[[]byte]{early, late} {
		select {
		case <-s.Stopped():
		case <-time.After(5 * time.Second):
			t.Fatalf("producer %v never saw the stop", s.SenderID())
		}
		select {
		case <-s.Cancelled():
			t.Fatal("a stop cancelled the producer")
		default:
		}
		if err := s.Send(context.Background(), []byte("last")); err != nil {
			t.Fatal(err)
		}
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
	}
	items, detached := 0, 0
	for detached < 2 {
		f := nextFrameWithin(t, an, 5*time.Second)
		switch f.Kind {
		case MPSCItem:
			items++
		case MPSCDetached:
			detached++
		default:
			t.Fatalf("unexpected frame %v (%v)", f.Kind, f.Err)
		}
	}
	if items != 2 {
		t.Fatalf("%d final items, want 2", items)
	}
}

// TestRemoteMPSCCancelSendsStreamCancel: the consumer's cancel sends each
// remote producer of an MPSC anchor _stream_cancel with the stream id of
// its attach request, the body the reference's cancel_all_senders sends. A
// Rust producer's cancellation token fires only on that message (seen in
// the live interop run); the closed connection alone left it unfired.
func TestRemoteMPSCCancelSendsStreamCancel(t *testing.T) {
	consumer := newRemoteNode(t)
	raw := newMessenger(t)
	got := make(chan []byte, 4)
	spy := messenger.FireHandler(wire.StreamCancelHandler, func(c *messenger.Context) {
		got <- append([]byte(nil), c.Payload...)
	})
	if err := msgrx.RegisterSystem(raw, spy); err != nil {
		t.Fatal(err)
	}
	connect(t, raw, consumer.msg)
	an := newMPSC(t, consumer.sm)
	h := an.Handle()
	body := fmt.Appendf(nil, `{"handle":{"hi":%d,"lo":%d},"session_id":5,"stream_cancel_handle":{"hi":%d,"lo":5}}`, h.Hi, h.Lo, uint64(raw.WorkerID()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	answer, err := raw.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorAttachHandler, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeMPSCAttachResponse(answer)
	if err != nil || resp.Refused {
		t.Fatalf("answer %s: %v", answer, err)
	}
	c, err := net.Dial("tcp", consumer.sm.streamAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := wire.TCPPreamble{AnchorID: h.LocalID(), SessionID: resp.RoutingSessionID}.Append(nil)
	b = wire.AppendTCPFrame(b, wire.AppendBytesItem(nil, []byte("a")))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem {
		t.Fatalf("%+v, want the item", f)
	}
	an.Controller().Cancel()
	select {
	case p := <-got:
		if want := `{"sender_stream_id":5}`; string(p) != want {
			t.Fatalf("_stream_cancel body %s, want %s", p, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no _stream_cancel reached the producer's node")
	}
}

// _mpsc_anchor_detach names a producer by its SenderID, a counter that
// every producer of the anchor could guess: only the worker that attached
// that producer may detach it. Another producer's worker is ignored and
// counted.
func TestRemoteMPSCDetachOnlyByItsProducer(t *testing.T) {
	producer, consumer := twoNodes(t)
	other := newRemoteNode(t)
	if err := other.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	an := newMPSC(t, consumer.sm)
	s1 := attachMPSCRemoteT(t, producer, an.Handle())
	attachMPSCRemoteT(t, other, an.Handle()) // holds the handle too
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dr := wire.MPSCDetachRequest{Handle: an.Handle(), SenderID: uint64(s1.SenderID())}
	if _, err := other.msg.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorDetachHandler, dr.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	if n := consumer.sm.remote.strangerSignals.Load(); n != 1 {
		t.Fatalf("stranger signals %d, want 1", n)
	}
	if err := s1.Send(ctx, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || f.Sender != s1.SenderID() {
		t.Fatalf("%+v, want an item of %v", f, s1.SenderID())
	}
	if _, err := producer.msg.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorDetachHandler, dr.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCDetached || f.Sender != s1.SenderID() {
		t.Fatalf("%+v, want Detached of %v", f, s1.SenderID())
	}
}
