package streaming

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/messenger"
)

// within waits for ch to close, for at most d; what names the signal in
// the failure.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

func notClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s closed", what)
	default:
	}
}

// finishAfterStop is a producer's answer to a stop: the final item, then
// Finalize; the consumer reads the item, then the end.
func finishAfterStop(t *testing.T, s *Sender[[]byte], a *Anchor[[]byte]) {
	t.Helper()
	within(t, s.Stopped(), 5*time.Second, "Stopped")
	notClosed(t, s.Cancelled(), "Cancelled after a stop")
	retired := s.Retired()
	if err := s.Send(context.Background(), []byte("last")); err != nil {
		t.Fatalf("send after stop: %v", err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatalf("Finalize after stop: %v", err)
	}
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "last" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	if out := retiredOutcome(t, retired, s); out != RetireSent {
		t.Fatalf("retired %v, want Sent", out)
	}
}

// TestRemoteStop: RequestStop crosses nodes, after and before the attach.
// The producer sees Stopped (not Cancelled), sends its last item and
// finalizes; the consumer reads both. The sender registry is then empty.
func TestRemoteStop(t *testing.T) {
	for _, before := range []bool{false, true} {
		producer, consumer := twoNodes(t)
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			t.Fatal(err)
		}
		if before {
			a.Controller().RequestStop()
		}
		s := attachRemoteT[[]byte](t, producer, a.Handle())
		if !before {
			if err := s.Send(context.Background(), []byte("first")); err != nil {
				t.Fatal(err)
			}
			if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "first" {
				t.Fatalf("Next = %q, %v", v, err)
			}
			a.Controller().RequestStop()
			a.Controller().RequestStop() // idempotent
		}
		finishAfterStop(t, s, a)
		if n := producer.sm.activeSenders(); n != 0 {
			t.Fatalf("before=%v: %d senders left in the registry", before, n)
		}
		a.Close()
	}
}

// fillEgress sends until a Send blocks on a full egress queue (the
// consumer does not read and its inlet holds one frame), and returns the
// channel that the blocked Send's error arrives on.
func fillEgress(t *testing.T, s *Sender[[]byte]) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	item := make([]byte, 16<<10)
	go func() {
		for {
			if err := s.Send(context.Background(), item); err != nil {
				done <- err
				return
			}
		}
	}()
	testwait.Until(t, "a Send blocked on a full queue", func() bool {
		return s.stream().WaitingForRoom()
	})
	return done
}

// TestRemoteCancelWakesBlockedSend: the consumer's cancel reaches a
// producer whose Send waits for room; the Send fails with ErrCancelled.
// One case sends only the _stream_cancel message, with no connection
// close to help, to show that the message alone does it.
func TestRemoteCancelWakesBlockedSend(t *testing.T) {
	for _, messageOnly := range []bool{false, true} {
		producer, consumer := twoNodes(t)
		a, err := CreateAnchor[[]byte](consumer.sm, WithCapacity(1))
		if err != nil {
			t.Fatal(err)
		}
		s := attachRemoteT[[]byte](t, producer, a.Handle())
		done := fillEgress(t, s)
		if messageOnly {
			inst, _ := msgrx.InstanceOf(consumer.msg, producer.msg.WorkerID())
			body := (&wire.StreamCancelRequest{SenderStreamID: s.stream().ID()}).AppendJSON(nil)
			if err := msgrx.Post(consumer.msg, inst, wire.StreamCancelHandler, body); err != nil {
				t.Fatal(err)
			}
		} else {
			a.Controller().Cancel()
		}
		select {
		case err := <-done:
			if !errors.Is(err, ErrCancelled) {
				t.Fatalf("blocked Send returned %v, want ErrCancelled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the blocked Send did not wake")
		}
		within(t, s.Cancelled(), time.Second, "Cancelled")
		within(t, s.Done(), time.Second, "Done")
		notClosed(t, s.Stopped(), "Stopped after a cancel")
		// The pump leaves the registry once it retires the stream.
		testwait.Until(t, "registry empty", func() bool { return producer.sm.activeSenders() == 0 })
		a.Close()
	}
}

// TestRemoteCancelBeforeAttachSignals: a cancel made before the attach is
// sent when the producer binds: Cancelled, Stopped, and sends fail.
func TestRemoteCancelBeforeAttachSignals(t *testing.T) {
	producer, consumer := twoNodes(t)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Controller().Cancel()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	within(t, s.Cancelled(), 5*time.Second, "Cancelled")
	within(t, s.Done(), time.Second, "Done")
	notClosed(t, s.Stopped(), "Stopped after a cancel")
	if err := s.Send(context.Background(), []byte("x")); !errors.Is(err, ErrCancelled) {
		t.Fatalf("send: %v, want ErrCancelled", err)
	}
	testwait.Until(t, "registry empty", func() bool { return producer.sm.activeSenders() == 0 })
}

// TestStreamSignalFromStranger: only the anchor's owner can signal a
// sender; a stop from another worker with a guessed id is ignored.
func TestStreamSignalFromStranger(t *testing.T) {
	producer, consumer := twoNodes(t)
	stranger := newMessenger(t)
	connect(t, stranger, producer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	body := (&wire.StreamCancelRequest{SenderStreamID: s.stream().ID()}).AppendJSON(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msgrx.Handshake(stranger, ctx, producer.msg.InstanceID()); err != nil {
		t.Fatal(err)
	}
	if err := msgrx.Post(stranger, producer.msg.InstanceID(), wire.StreamCancelHandler, body); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the stranger's cancel handled", func() bool { return producer.sm.remote.tcp.StrangerSignals() == 1 })
	notClosed(t, s.Cancelled(), "Cancelled by a stranger")
	notClosed(t, s.Stopped(), "Stopped by a stranger")
	a.Controller().RequestStop() // the owner's stop still works
	within(t, s.Stopped(), 5*time.Second, "Stopped")
}

// unaryNull calls a control handler and wants the unit answer.
func unaryNull(t *testing.T, from *messenger.Messenger, to *remoteNode, handler string, h wire.AnchorHandle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body, err := from.Unary(ctx, to.msg.InstanceID(), handler, (&wire.HandleRequest{Handle: h}).AppendJSON(nil))
	if err != nil || string(body) != "null" {
		t.Fatalf("%s: %q, %v; want null", handler, body, err)
	}
}

// connClosed waits until the owner closes the raw stream connection c.
func connClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the owner did not close the connection: %v", err)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the owner did not close the connection within 5s")
	}
}

// TestAnchorDetachHandler: _anchor_detach, as a Rust producer sends it,
// ends the bind: the connection closes, the item before stays, and a new
// producer attaches at once. It is idempotent.
func TestAnchorDetachHandler(t *testing.T) {
	producer, consumer := twoNodes(t)
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c := dialStream(t, raw, consumer, a.Handle())
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "a" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	unaryNull(t, raw, consumer, wire.AnchorDetachHandler, a.Handle())
	unaryNull(t, raw, consumer, wire.AnchorDetachHandler, a.Handle())
	connClosed(t, c)
	s := attachRemoteT[[]byte](t, producer, a.Handle()) // no ErrAlreadyAttached
	if err := s.Send(context.Background(), []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "b" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
}

// TestAnchorFinalizeHandler: _anchor_finalize ends the stream normally:
// the item before it, then io.EOF; the anchor leaves the registry.
func TestAnchorFinalizeHandler(t *testing.T) {
	consumer := newRemoteNode(t)
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c := dialStream(t, raw, consumer, a.Handle())
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "a" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	unaryNull(t, raw, consumer, wire.AnchorFinalizeHandler, a.Handle())
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	unaryNull(t, raw, consumer, wire.AnchorFinalizeHandler, a.Handle())
	connClosed(t, c)
	if n := consumer.sm.activeAnchors(); n != 0 {
		t.Fatalf("%d anchors left", n)
	}
	// An unattached anchor is finalized too, as in the reference.
	b, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	unaryNull(t, raw, consumer, wire.AnchorFinalizeHandler, b.Handle())
	if _, err := nextItemWithin(t, b, 5*time.Second); err != io.EOF {
		t.Fatalf("unattached: want io.EOF, got %v", err)
	}
}

// TestAnchorCancelHandler: _anchor_cancel ends the stream with
// ErrCancelled and removes the anchor; unknown and repeated handles, and
// MPSC ones, are no-ops; a bad body is an error.
func TestAnchorCancelHandler(t *testing.T) {
	consumer := newRemoteNode(t)
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c := dialStream(t, raw, consumer, a.Handle())
	unaryNull(t, raw, consumer, wire.AnchorCancelHandler, a.Handle())
	for {
		_, err := nextItemWithin(t, a, 5*time.Second)
		if errors.Is(err, ErrCancelled) {
			break
		}
		if err != nil {
			t.Fatalf("want ErrCancelled, got %v", err)
		}
	}
	connClosed(t, c)
	unaryNull(t, raw, consumer, wire.AnchorCancelHandler, a.Handle())
	unaryNull(t, raw, consumer, wire.AnchorCancelHandler, wire.NewAnchorHandle(consumer.msg.WorkerID(), 12345))
	m, err := CreateMPSCAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	unaryNull(t, raw, consumer, wire.AnchorCancelHandler, m.Handle())
	if n := consumer.sm.activeAnchors(); n != 1 {
		t.Fatalf("%d anchors, want the MPSC one", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := raw.Unary(ctx, consumer.msg.InstanceID(), wire.AnchorCancelHandler, []byte(`{}`)); err == nil {
		t.Fatal("a body without a handle was accepted")
	}
}

// TestPendingBindPeerLost: a stream bound by _anchor_attach whose
// producer's node dies before connecting ends at once with
// ErrSenderDropped, not at the 60 s accept window.
func TestPendingBindPeerLost(t *testing.T) {
	consumer := newRemoteNode(t)
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	req := wire.AttachRequest{Handle: a.Handle(), SessionID: 1, CancelHandle: wire.NewCancelHandle(raw.WorkerID(), 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := raw.Unary(ctx, consumer.msg.InstanceID(), wire.AnchorAttachHandler, req.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	if err := raw.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("want ErrSenderDropped, got %v", err)
	}
	n := consumer.sm.remote.tcp.PendingBinds()
	if n != 0 {
		t.Fatalf("%d pending binds left", n)
	}
}

// TestRemoteRenewal: live reservations on another worker get a new window;
// attached and unknown ones are no-ops; more than 256 handles make one
// request per 256; an owner without the handler, and an unknown owner, are
// errors.
func TestRemoteRenewal(t *testing.T) {
	producer, consumer := twoNodes(t)
	live, err := CreateAnchor[[]byte](consumer.sm, WithUnattachedTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	busy, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	attachRemoteT[[]byte](t, producer, busy.Handle())
	_, before := armed(&live.st)
	unknown := wire.NewAnchorHandle(consumer.msg.WorkerID(), 777)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := consumer.sm.remote
	if err := producer.sm.RenewReservationsContext(ctx, live.Handle(), busy.Handle(), unknown); err != nil {
		t.Fatal(err)
	}
	if on, after := armed(&live.st); !on || after <= before {
		t.Fatalf("the live reservation was not renewed (armed %v)", on)
	}
	if on, _ := armed(&busy.st); on {
		t.Fatal("renewal armed an attached anchor")
	}
	if n := r.renewRequests.Load(); n != 1 {
		t.Fatalf("%d requests for 3 handles, want 1", n)
	}

	hs := make([]wire.AnchorHandle, 2*wire.MaxRenewBatch+1)
	for i := range hs {
		hs[i] = wire.NewAnchorHandle(consumer.msg.WorkerID(), uint64(i+1))
	}
	hs[300] = live.Handle()
	if err := producer.sm.RenewReservationsContext(ctx, hs...); err != nil {
		t.Fatal(err)
	}
	if n := r.renewRequests.Load() - 1; n != 3 {
		t.Fatalf("%d requests for %d handles, want 3", n, len(hs))
	}

	old := newMessenger(t) // a node with no _anchor_renew
	if err := producer.msg.RegisterPeer(old.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := producer.sm.RenewReservationsContext(ctx, wire.NewAnchorHandle(old.WorkerID(), 5)); err == nil {
		t.Fatal("renewal on a node without the handler succeeded")
	}
	if err := producer.sm.RenewReservations(wire.NewAnchorHandle(ext.NewInstanceID().WorkerID(), 5)); !errors.Is(err, messenger.ErrPeerNotRegistered) {
		t.Fatalf("renewal on an unknown worker: %v", err)
	}
}

// TestSenderRegistryEmpty: every way a remote sender ends takes it out of
// the registry: finalize, detach, close, a refused attach.
func TestSenderRegistryEmpty(t *testing.T) {
	producer, consumer := twoNodes(t)
	ends := []func(*Sender[[]byte]) error{
		(*Sender[[]byte]).Finalize, (*Sender[[]byte]).Detach, (*Sender[[]byte]).Close,
	}
	for i, end := range ends {
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			t.Fatal(err)
		}
		s := attachRemoteT[[]byte](t, producer, a.Handle())
		if n := producer.sm.activeSenders(); n != 1 {
			t.Fatalf("case %d: %d senders while live, want 1", i, n)
		}
		retired := s.Retired()
		if err := end(s); err != nil {
			t.Fatal(err)
		}
		select {
		case <-retired:
		case <-time.After(5 * time.Second):
			t.Fatalf("case %d: not retired", i)
		}
		if n := producer.sm.activeSenders(); n != 0 {
			t.Fatalf("case %d: %d senders left", i, n)
		}
		a.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := AttachAnchor[[]byte](ctx, producer.sm, wire.NewAnchorHandle(consumer.msg.WorkerID(), 99)); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("attach to nothing: %v", err)
	}
	if n := producer.sm.activeSenders(); n != 0 {
		t.Fatalf("refused attach: %d senders left", n)
	}
}

// TestAnchorControlFromStranger: a worker that holds the handle but is not
// the stream's bound producer cannot detach, finalize or cancel it; the
// producer still can.
func TestAnchorControlFromStranger(t *testing.T) {
	producer, consumer := twoNodes(t)
	stranger := newMessenger(t)
	connect(t, stranger, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body := (&wire.HandleRequest{Handle: a.Handle()}).AppendJSON(nil)
	for i, h := range []string{wire.AnchorDetachHandler, wire.AnchorFinalizeHandler, wire.AnchorCancelHandler} {
		if _, err := stranger.Unary(ctx, consumer.msg.InstanceID(), h, body); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if n := consumer.sm.remote.tcp.StrangerControls(); n != uint64(i+1) {
			t.Fatalf("after %s: %d stranger controls counted, want %d", h, n, i+1)
		}
	}
	if err := s.Send(ctx, []byte("still mine")); err != nil {
		t.Fatal(err)
	}
	if got, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(got) != "still mine" {
		t.Fatalf("after the stranger's controls: %q, %v", got, err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("after the producer's finalize: %v, want io.EOF", err)
	}
}

// TestAnchorControlFromStrangerOverTheMux: the same for a stream that a
// mux slot feeds (the default path): only its producer may end it.
func TestAnchorControlFromStrangerOverTheMux(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	stranger := newMessenger(t)
	connect(t, stranger, consumer.msg)
	a, s := openedStream(t, producer, consumer)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body := (&wire.HandleRequest{Handle: a.Handle()}).AppendJSON(nil)
	for i, h := range []string{wire.AnchorFinalizeHandler, wire.AnchorCancelHandler} {
		if _, err := stranger.Unary(ctx, consumer.msg.InstanceID(), h, body); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if n := consumer.sm.remote.tcp.StrangerControls(); n != uint64(i+1) {
			t.Fatalf("after %s: %d stranger controls counted, want %d", h, n, i+1)
		}
	}
	fill(t, s, 1, 1)
	readTokens(t, a, 1, 1, 5*time.Second)
}
