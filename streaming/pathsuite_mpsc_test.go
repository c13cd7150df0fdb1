package streaming

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/streaming/internal/mux"
)

// The MPSC clauses of the path suite: the same contract for an anchor of
// many producers, where Detached and Dropped end one producer, not the
// stream.
var mpscClauses = []suiteClause{
	{name: "mpsc-items-in-order", run: clauseMPSCItemsInOrder},
	{name: "mpsc-errors-and-drop", run: clauseMPSCErrorsAndDrop},
	{name: "mpsc-stop-cancel", run: clauseMPSCStopCancel},
	{name: "mpsc-silent-producer-lost", remoteOnly: true, run: clauseMPSCSilentProducerLost},
	{name: "mpsc-producer-node-lost", remoteOnly: true, run: clauseMPSCProducerNodeLost},
}

// suiteMPSC is an MPSC anchor on env.cons, closed when the test ends.
func suiteMPSC(t *testing.T, env *pathEnv) *MPSCAnchor[[]byte] {
	t.Helper()
	an, err := CreateMPSCAnchor[[]byte](env.cons)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { an.Close() })
	return an
}

// suiteAttachMPSC attaches a producer on m; it is closed when the test
// ends.
func suiteAttachMPSC(t *testing.T, m *Manager, h AnchorHandle) *MPSCSender[[]byte] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := AttachMPSCAnchor[[]byte](ctx, m, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// suiteFrame is the next frame, bounded by d of the bubble's clock.
func suiteFrame(t *testing.T, an *MPSCAnchor[[]byte], d time.Duration) MPSCFrame[[]byte] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	f, err := an.Next(ctx)
	if err != nil {
		t.Fatalf("MPSC Next: %v", err)
	}
	return f
}

// clauseMPSCItemsInOrder: two producers send at once; the consumer gets
// each one's items in its order, tagged with its distinct SenderID, then
// its Detached; both retire Sent and the anchor counts no producer.
func clauseMPSCItemsInOrder(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	an := suiteMPSC(t, env)
	senders := []*MPSCSender[[]byte]{suiteAttachMPSC(t, env.prod, an.Handle()), suiteAttachMPSC(t, env.prod, an.Handle())}
	if a, b := senders[0].SenderID(), senders[1].SenderID(); a == 0 || b == 0 || a == b {
		t.Fatalf("SenderIDs %v and %v, want two different non-zero ids", a, b)
	}
	const n = 500
	var wg sync.WaitGroup
	retired := make([]<-chan struct{}, len(senders))
	for i, s := range senders {
		retired[i] = s.Retired()
		wg.Go(func() {
			for k := range n {
				if err := s.Send(context.Background(), fmt.Appendf(nil, "%d:%d", s.SenderID(), k)); err != nil {
					t.Errorf("send %d: %v", k, err)
					return
				}
			}
			if err := s.Detach(); err != nil {
				t.Errorf("detach: %v", err)
			}
		})
	}
	next := map[SenderID]int{}
	for left := len(senders); left > 0; {
		f := suiteFrame(t, an, 10*time.Second)
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
	for i, s := range senders {
		if out := retiredOutcome(t, retired[i], s); out != RetireSent {
			t.Fatalf("producer %d retired %v, want Sent", i, out)
		}
	}
	if got := an.Senders(); got != 0 {
		t.Fatalf("Senders after both detached = %d, want 0", got)
	}
}

// clauseMPSCErrorsAndDrop: a producer's soft error reaches the consumer
// tagged with it; a producer that closes without detaching ends as
// Dropped, and the other goes on.
func clauseMPSCErrorsAndDrop(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	an := suiteMPSC(t, env)
	s1, s2 := suiteAttachMPSC(t, env.prod, an.Handle()), suiteAttachMPSC(t, env.prod, an.Handle())
	ctx := context.Background()
	if err := s1.SendError(ctx, "soft"); err != nil {
		t.Fatal(err)
	}
	f := suiteFrame(t, an, 10*time.Second)
	var se *SenderError
	if f.Kind != MPSCSenderError || f.Sender != s1.SenderID() || !errors.As(f.Err, &se) || se.Message != "soft" {
		t.Fatalf("after SendError: %+v, want the soft error of %v", f, s1.SenderID())
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if f := suiteFrame(t, an, 10*time.Second); f.Kind != MPSCDropped || f.Sender != s1.SenderID() {
		t.Fatalf("after Close: %+v, want Dropped of %v", f, s1.SenderID())
	}
	if err := s2.Send(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if f := suiteFrame(t, an, 10*time.Second); f.Kind != MPSCItem || f.Sender != s2.SenderID() || string(f.Item) != "after" {
		t.Fatalf("the other producer: %+v", f)
	}
}

// clauseMPSCStopCancel: RequestStop reaches every producer as Stopped,
// not Cancelled; a Cancel then reaches them as Cancelled, their Sends
// fail with ErrCancelled and the consumer's Next with ErrCancelled.
func clauseMPSCStopCancel(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	an := suiteMPSC(t, env)
	senders := []*MPSCSender[[]byte]{suiteAttachMPSC(t, env.prod, an.Handle()), suiteAttachMPSC(t, env.prod, an.Handle())}
	ctx := context.Background()
	for _, s := range senders { // both bound on the owner before the signals
		if err := s.Send(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		suiteFrame(t, an, 10*time.Second)
	}
	an.Controller().RequestStop()
	for _, s := range senders {
		heard(t, s.Stopped(), "the stop")
		if !notYet(s.Cancelled()) {
			t.Fatal("a stop cancelled a producer")
		}
	}
	an.Controller().Cancel()
	for _, s := range senders {
		heard(t, s.Cancelled(), "the cancel")
		if err := s.Send(ctx, []byte("y")); !errors.Is(err, ErrCancelled) {
			t.Fatalf("Send after the cancel = %v, want ErrCancelled", err)
		}
	}
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := an.Next(nctx); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Next after the cancel = %v, want ErrCancelled", err)
	}
}

// clauseMPSCSilentProducerLost: a remote producer from which nothing more
// arrives ends alone, as Dropped, after the watchdog's windows (counted
// as no firing, on either wire path: that counts single-sender streams);
// a producer on the consumer's own worker goes on. The silent producer
// hears of it: the owner closes its slot, or its connection.
func clauseMPSCSilentProducerLost(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	an := suiteMPSC(t, env)
	local := suiteAttachMPSC(t, env.cons, an.Handle())
	s := suiteAttachMPSC(t, env.prod, an.Handle())
	ctx := context.Background()
	// More than a window of credit, each read, so the owner's credit has
	// come back on the connection its close takes (see
	// clauseSilentProducerLost).
	for i := range 3 * mux.DefaultInitialCredit {
		if err := s.Send(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if f := suiteFrame(t, an, 10*time.Second); f.Kind != MPSCItem || f.Sender != s.SenderID() {
			t.Fatalf("frame %d: %+v", i, f)
		}
	}
	env.holdProducer(t)
	last := time.Now()
	f := suiteFrame(t, an, 10*defaultHeartbeatInterval)
	took := time.Since(last)
	if f.Kind != MPSCDropped || f.Sender != s.SenderID() {
		t.Fatalf("after the silence: %+v, want Dropped of %v", f, s.SenderID())
	}
	w := defaultHeartbeatInterval
	if lo, hi := 2*w, (detectionMultiplier+1)*w; took < lo || took > hi {
		t.Fatalf("dropped %v after the last frame, want within [%v, %v]", took, lo, hi)
	}
	t.Logf("dropped %v after the last frame (window %v)", took, w)
	if n := env.cons.watchdogFirings(); n != 0 {
		t.Fatalf("WatchdogFirings = %d, want 0 for an MPSC producer", n)
	}
	if err := local.Send(ctx, []byte("still")); err != nil {
		t.Fatal(err)
	}
	if f := suiteFrame(t, an, 10*time.Second); f.Kind != MPSCItem || f.Sender != local.SenderID() {
		t.Fatalf("the other producer: %+v", f)
	}
	heard(t, s.Cancelled(), "the silent producer's end")
}

// clauseMPSCProducerNodeLost: the node of one producer is killed (every
// socket closes); its producer ends as Dropped, promptly, and a producer
// on the consumer's worker goes on.
func clauseMPSCProducerNodeLost(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	an := suiteMPSC(t, env)
	local := suiteAttachMPSC(t, env.cons, an.Handle())
	d := suiteAttachMPSC(t, env.prod, an.Handle())
	ctx := context.Background()
	if err := d.Send(ctx, []byte("d")); err != nil {
		t.Fatal(err)
	}
	if f := suiteFrame(t, an, 10*time.Second); f.Kind != MPSCItem || f.Sender != d.SenderID() {
		t.Fatalf("first frame %+v", f)
	}
	killed := time.Now()
	env.prodHost.Kill()
	f := suiteFrame(t, an, 10*defaultHeartbeatInterval)
	if f.Kind != MPSCDropped || f.Sender != d.SenderID() {
		t.Fatalf("after the node died: %+v, want Dropped of %v", f, d.SenderID())
	}
	if took := time.Since(killed); took > 100*time.Millisecond {
		t.Fatalf("Dropped %v after the producer's node died, want within 100ms", took)
	}
	if err := local.Send(ctx, []byte("alive")); err != nil {
		t.Fatal(err)
	}
	if f := suiteFrame(t, an, 10*time.Second); f.Kind != MPSCItem || string(f.Item) != "alive" {
		t.Fatalf("the survivor: %+v", f)
	}
}
