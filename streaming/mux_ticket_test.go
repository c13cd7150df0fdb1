package streaming

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// ticketPair is a producer and a consumer node with the mux, each
// registered with the other, as a frontend and a worker that already talk.
func ticketPair(t *testing.T, cons ...ManagerOption) (producer, consumer *remoteNode) {
	t.Helper()
	producer = newRemoteNode(t, muxOn)
	consumer = newRemoteNode(t, append([]ManagerOption{muxOn}, cons...)...)
	connect(t, producer.msg, consumer.msg)
	return producer, consumer
}

func mustPrebind(t *testing.T, m *Manager, a *Anchor[[]byte]) StreamOpenTicket {
	t.Helper()
	tk, err := m.PrebindAnchor(a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func openTicket(t *testing.T, producer *remoteNode, a *Anchor[[]byte], tk StreamOpenTicket) *Sender[[]byte] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := OpenAnchorStream[[]byte](ctx, producer.sm, a.Handle(), tk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func cancelledWithin(t *testing.T, s *Sender[[]byte], what string) {
	t.Helper()
	select {
	case <-s.Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the producer was not cancelled", what)
	}
}

// A ticket travels as JSON, opens the stream with no _anchor_attach, and
// the stream works as an attached one.
func TestMuxTicketOpensWithoutAttach(t *testing.T) {
	reg, vm := newMetrics(t)
	producer, consumer := ticketPair(t, WithMetrics(vm))
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	tk := mustPrebind(t, consumer.sm, a)
	raw, _ := json.Marshal(tk)
	var carried StreamOpenTicket
	if err := json.Unmarshal(raw, &carried); err != nil || carried != tk {
		t.Fatalf("the ticket did not survive JSON: %+v, %v", carried, err)
	}
	s := openTicket(t, producer, a, carried)
	if s.NegotiatedTransport() != mux.WireKey {
		t.Fatalf("transport %q", s.NegotiatedTransport())
	}
	fill(t, s, 0, 50) // under C + the inlet: no reader needed yet
	s.Finalize()
	readTokens(t, a, 0, 50, 5*time.Second)
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	if got := metricValue(t, reg, opsTotal, op("attach", "success", "messenger-mux-v2")); got != 0 {
		t.Fatalf("%v attaches on the consumer, want 0", got)
	}
	if got := metricValue(t, reg, opsTotal, op("prebind", "success", "messenger-mux-v2")); got != 1 {
		t.Fatalf("%v pre-binds, want 1", got)
	}
}

// PrebindAnchor refuses what it cannot pre-bind, counted as errors;
// OpenAnchorStream refuses the minting node.
func TestMuxPrebindRefusals(t *testing.T) {
	reg, vm := newMetrics(t)
	producer, consumer := ticketPair(t, WithMetrics(vm))
	off := newRemoteNode(t) // the mux off
	a, _ := CreateAnchor[[]byte](consumer.sm)
	mp := newMPSC(t, consumer.sm)
	other, _ := CreateAnchor[[]byte](producer.sm)
	attached, _ := CreateAnchor[[]byte](consumer.sm)
	attachRemoteT[[]byte](t, producer, attached.Handle())
	offAnchor, _ := CreateAnchor[[]byte](off.sm)
	mustPrebind(t, consumer.sm, a)
	for name, try := range map[string]func() error{
		"twice":      func() error { _, err := consumer.sm.PrebindAnchor(a.Handle()); return err },
		"mpsc":       func() error { _, err := consumer.sm.PrebindAnchor(mp.Handle()); return err },
		"other node": func() error { _, err := consumer.sm.PrebindAnchor(other.Handle()); return err },
		"attached":   func() error { _, err := consumer.sm.PrebindAnchor(attached.Handle()); return err },
		"no mux":     func() error { _, err := off.sm.PrebindAnchor(offAnchor.Handle()); return err },
	} {
		if err := try(); !errors.Is(err, ErrNoPrebind) {
			t.Errorf("%s: %v, want ErrNoPrebind", name, err)
		}
	}
	if got := metricValue(t, reg, opsTotal, op("prebind", "error", "messenger-mux-v2")); got != 4 {
		t.Fatalf("%v pre-bind errors counted, want 4 (the node without the mux has no metrics)", got)
	}
	tk := mustPrebind(t, producer.sm, other)
	if _, err := OpenAnchorStream[[]byte](context.Background(), producer.sm, other.Handle(), tk); !errors.Is(err, ErrTicketOnOwner) {
		t.Fatalf("open on the minting node: %v", err)
	}
}

// A forged or replayed ticket opens nothing: its producer is cancelled at
// once, the refusal is counted, and another stream on the peer goes on.
func TestMuxTicketForgedOrReplayed(t *testing.T) {
	producer, consumer := ticketPair(t)
	live, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	good := openTicket(t, producer, live, mustPrebind(t, consumer.sm, live))
	fill(t, good, 0, 5)

	victim, _ := CreateAnchor[[]byte](consumer.sm)
	tk := mustPrebind(t, consumer.sm, victim)
	forged := tk
	forged.RoutingSessionID ^= 0x5a5a
	cancelledWithin(t, openTicket(t, producer, victim, forged), "forged")
	s := openTicket(t, producer, victim, tk) // the real one still works
	fill(t, s, 0, 1)
	readTokens(t, victim, 0, 1, 5*time.Second)
	cancelledWithin(t, openTicket(t, producer, victim, tk), "replayed")
	if got := muxOf(t, consumer).N.Dropped[metrics.DropUnknownSlot].Load(); got != 2 {
		t.Fatalf("refused OpenSlots counted %d, want 2", got)
	}
	fill(t, good, 5, 5)
	readTokens(t, live, 0, 10, 5*time.Second)
}

// An ordinary attach adopts an unclaimed pre-bind (the ticket then opens
// nothing); a same-worker attach releases it; a producer without the mux
// is refused and the pre-bind released.
func TestMuxPrebindRules(t *testing.T) {
	producer, consumer := ticketPair(t)
	a, _ := CreateAnchor[[]byte](consumer.sm)
	tk := mustPrebind(t, consumer.sm, a)
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	if s.slot() == nil || s.slot().Session != tk.RoutingSessionID {
		t.Fatalf("the attach did not adopt the pre-bind (session %v, ticket %v)", s.slot(), tk.RoutingSessionID)
	}
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	cancelledWithin(t, openTicket(t, producer, a, tk), "ticket after adoption")

	b, _ := CreateAnchor[[]byte](consumer.sm)
	tk = mustPrebind(t, consumer.sm, b)
	local, err := AttachAnchor[[]byte](context.Background(), consumer.sm, b.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	cancelledWithin(t, openTicket(t, producer, b, tk), "ticket after a same-worker attach")

	legacy := newRemoteNode(t) // the mux off
	connect(t, legacy.msg, consumer.msg)
	c, _ := CreateAnchor[[]byte](consumer.sm)
	tk = mustPrebind(t, consumer.sm, c)
	if _, err := AttachAnchor[[]byte](context.Background(), legacy.sm, c.Handle()); err == nil {
		t.Fatal("a producer without the mux attached to a pre-bound anchor")
	}
	cancelledWithin(t, openTicket(t, producer, c, tk), "ticket after a refused attach")
	again := attachRemoteT[[]byte](t, producer, c.Handle()) // the anchor is free again
	fill(t, again, 0, 1)
	readTokens(t, c, 0, 1, 5*time.Second)
}

// An unclaimed pre-bind is reaped at its accept window: the consumer sees
// ErrSenderDropped, and the reap is counted.
func TestMuxTicketExpires(t *testing.T) {
	_, consumer := ticketPair(t, withAcceptWindow(50*time.Millisecond))
	a, _ := CreateAnchor[[]byte](consumer.sm)
	mustPrebind(t, consumer.sm, a)
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("after the accept window: %v", err)
	}
	if got := muxOf(t, consumer).N.UnclaimedReaped.Load(); got != 1 {
		t.Fatalf("reaped %d, want 1", got)
	}
}

// A stop made before the ticket's OpenSlot reaches the producer once it
// opens; a consumer's close wakes an idle ticket producer.
func TestMuxTicketStopAndCancel(t *testing.T) {
	producer, consumer := ticketPair(t)
	a, _ := CreateAnchor[[]byte](consumer.sm)
	tk := mustPrebind(t, consumer.sm, a)
	a.Controller().RequestStop()
	s := openTicket(t, producer, a, tk)
	select {
	case <-s.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("a stop made before the OpenSlot did not reach the ticket's producer")
	}
	if err := s.Send(context.Background(), []byte("final")); err != nil {
		t.Fatal(err)
	}
	s.Finalize()
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "final" {
		t.Fatalf("Next = %q, %v", v, err)
	}

	b, _ := CreateAnchor[[]byte](consumer.sm)
	idle := openTicket(t, producer, b, mustPrebind(t, consumer.sm, b))
	testwait.Until(t, "the OpenSlot to arrive", func() bool {
		return b.st.Snapshot().Feed != nil
	})
	b.Close()
	cancelledWithin(t, idle, "consumer close")
}

// Renewal extends an unclaimed pre-bind's accept window: renewed in time,
// the bind outlives its first window and the ticket still opens it.
func TestMuxTicketRenewal(t *testing.T) {
	const window = 300 * time.Millisecond
	producer, consumer := ticketPair(t, withAcceptWindow(window))
	a, _ := CreateAnchor[[]byte](consumer.sm)
	tk := mustPrebind(t, consumer.sm, a)
	start := time.Now()
	for time.Since(start) < 2*window {
		if err := consumer.sm.RenewReservations(a.Handle()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(window / 5)
	}
	s := openTicket(t, producer, a, tk)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	if got := muxOf(t, consumer).N.UnclaimedReaped.Load(); got != 0 {
		t.Fatalf("a renewed bind was reaped (%d)", got)
	}
}
