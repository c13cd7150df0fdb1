package messenger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/discovery/discoverytest"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

func echoNode(t *testing.T, d *discoverytest.Memory, opts ...velo.Option) *velo.Node {
	n := newNode(t, append([]velo.Option{velo.WithDiscovery(d)}, opts...)...)
	must(t, n.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	return n
}

// TestNodePublishesAndWithdraws: New publishes the node; Shutdown
// withdraws it.
func TestNodePublishesAndWithdraws(t *testing.T) {
	d := discoverytest.NewMemory()
	n := echoNode(t, d)
	if !d.Has(n.InstanceID()) {
		t.Fatal("node not published")
	}
	must(t, shutdownWithin(n, failAfter))
	if d.Has(n.InstanceID()) {
		t.Fatal("node still published after shutdown")
	}
}

// TestDiscoveredPeersAreBounded: with a bound of 2, a node that called 3
// discovered peers keeps 2, and the one it forgot is found again.
func TestDiscoveredPeersAreBounded(t *testing.T) {
	d := discoverytest.NewMemory()
	a := echoNode(t, d, velo.WithMaxDiscoveredPeers(2))
	peers := []*velo.Node{echoNode(t, d), echoNode(t, d), echoNode(t, d)}
	ctx := testCtx(t)
	for _, p := range append(peers, peers[0]) {
		if _, err := a.Unary(ctx, p.InstanceID(), "echo", nil); err != nil {
			t.Fatal(err)
		}
		if n := a.Messenger().DiscoveredPeers(); n > 2 {
			t.Fatalf("%d discovered peers kept, bound 2", n)
		}
	}
	if d.Lookups() != 4 {
		t.Fatalf("%d lookups, want 4 (3 peers, then the forgotten first one again)", d.Lookups())
	}
}

// TestResolveWorker: a worker id resolves through discovery once, then
// from the peer table.
func TestResolveWorker(t *testing.T) {
	d := discoverytest.NewMemory()
	a, b := echoNode(t, d), echoNode(t, d)
	for range 2 {
		id, err := a.Messenger().ResolveWorker(testCtx(t), b.PeerInfo().WorkerID())
		if err != nil || id != b.InstanceID() {
			t.Fatalf("resolve: %s, %v", id, err)
		}
	}
	if d.Lookups() != 1 {
		t.Fatalf("%d lookups, want 1", d.Lookups())
	}
	_, err := a.Messenger().ResolveWorker(testCtx(t), ext.NewInstanceID().WorkerID())
	if !errors.Is(err, velo.ErrPeerNotRegistered) || !errors.Is(err, ext.ErrPeerNotFound) {
		t.Fatalf("unknown worker: %v", err)
	}
}

// TestRegistrationLossFailsCallsInFlight: when the backend reports that a
// peer's registration is gone, the call waiting on it fails at once with
// ErrPeerUnreachable, though its connection is still up; the next call
// finds nothing. Without the watch, the call would wait for its deadline.
func TestRegistrationLossFailsCallsInFlight(t *testing.T) {
	d := discoverytest.NewMemory()
	a, b := echoNode(t, d), echoNode(t, d)
	hang := newGate(t)
	entered := make(chan struct{}, 1)
	must(t, b.Register(velo.UnaryHandler("hang", func(*velo.Context) ([]byte, error) {
		entered <- struct{}{}
		return nil, hang.wait()
	})))
	t.Cleanup(hang.open)
	done := make(chan error, 1)
	go func() { _, err := a.Unary(testCtx(t), b.InstanceID(), "hang", nil); done <- err }()
	recv(t, entered, "the call to reach B")
	d.Expire(b.InstanceID())
	if err := recv(t, done, "the call to fail"); !errors.Is(err, velo.ErrPeerUnreachable) {
		t.Fatalf("call failed with %v, want ErrPeerUnreachable", err)
	}
	if _, err := a.Unary(testCtx(t), b.InstanceID(), "echo", nil); !errors.Is(err, ext.ErrPeerNotFound) {
		t.Fatalf("next call: %v, want ErrPeerNotFound", err)
	}
	if n := a.Messenger().DiscoveredPeers(); n != 0 {
		t.Fatalf("%d discovered peers after the loss, want 0", n)
	}
}

// TestRestartedPeerIsFoundAgain: A holds a stale address for B (another
// node, C, answers there). The first call finds out (ErrPeerRestarted);
// the next asks discovery again and reaches B at its real address.
func TestRestartedPeerIsFoundAgain(t *testing.T) {
	d := discoverytest.NewMemory()
	a, b, c := echoNode(t, d), echoNode(t, d), echoNode(t, d)
	must(t, a.RegisterPeer(ext.PeerInfo{InstanceID: b.InstanceID(), Address: c.PeerInfo().Address}))
	if _, err := a.Unary(testCtx(t), b.InstanceID(), "echo", nil); !errors.Is(err, velo.ErrPeerRestarted) {
		t.Fatalf("first call: %v, want ErrPeerRestarted", err)
	}
	if got, err := a.Unary(testCtx(t), b.InstanceID(), "echo", []byte("hi")); err != nil || string(got) != "hi" {
		t.Fatalf("second call: %q, %v", got, err)
	}
}

// TestConcurrentFirstCallsShareOnePeer: many first calls to one unknown
// peer at once all succeed, and the peer's handshake runs once.
func TestConcurrentFirstCallsShareOnePeer(t *testing.T) {
	d := discoverytest.NewMemory()
	a, b := echoNode(t, d), echoNode(t, d)
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() { _, err := a.Unary(testCtx(t), b.InstanceID(), "echo", nil); errs <- err }()
	}
	for range n {
		if err := recv(t, errs, "a first call"); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Messenger().DiscoveredPeers(); got != 1 {
		t.Fatalf("%d discovered peers, want 1", got)
	}
	if h := a.Messenger().Handshakes(); h != 1 {
		t.Fatalf("%d handshakes, want 1", h)
	}
}

// TestBrokenWatchIsReopened: after the backend breaks the node's watch,
// the node opens it again, and a later removal still fails the call in
// flight.
func TestBrokenWatchIsReopened(t *testing.T) {
	defer messenger.SetWatchRetry(time.Millisecond)()
	d := discoverytest.NewMemory()
	a, b := echoNode(t, d), echoNode(t, d)
	hang := newGate(t)
	entered := make(chan struct{}, 1)
	must(t, b.Register(velo.UnaryHandler("hang", func(*velo.Context) ([]byte, error) {
		entered <- struct{}{}
		return nil, hang.wait()
	})))
	t.Cleanup(hang.open)
	d.BreakWatches()
	waitFor(t, "the watch to be reopened", func() bool { return d.Watches() == 2 }) // one per node
	done := make(chan error, 1)
	go func() { _, err := a.Unary(testCtx(t), b.InstanceID(), "hang", nil); done <- err }()
	recv(t, entered, "the call to reach B")
	d.Expire(b.InstanceID())
	if err := recv(t, done, "the call to fail"); !errors.Is(err, velo.ErrPeerUnreachable) {
		t.Fatalf("call failed with %v, want ErrPeerUnreachable", err)
	}
}

// refusingDiscovery refuses every registration.
type refusingDiscovery struct{ *discoverytest.Memory }

func (refusingDiscovery) Register(context.Context, ext.PeerInfo) error {
	return errors.New("backend refuses")
}

// TestPublishFailureFailsNew: a node that cannot publish itself does not
// start, and leaves nothing running (goleak checks at the end).
func TestPublishFailureFailsNew(t *testing.T) {
	tr, err := tcp.New()
	must(t, err)
	n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithDiscovery(refusingDiscovery{discoverytest.NewMemory()}))
	if err == nil {
		shutdownWithin(n, failAfter)
		t.Fatal("New succeeded though the backend refused the registration")
	}
}

// TestStreamOwnerFoundThroughDiscovery: a producer that never met the
// anchor's owner attaches to its handle (and opens a ticket) by finding the
// owner's worker through discovery; without it the attach would fail as
// not registered.
func TestStreamOwnerFoundThroughDiscovery(t *testing.T) {
	d := discoverytest.NewMemory()
	owner, producer := echoNode(t, d), echoNode(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ticket := range []bool{false, true} {
		a, err := streaming.CreateAnchor[[]byte](owner.Streams)
		must(t, err)
		var s *streaming.Sender[[]byte]
		if ticket {
			tk, err := owner.Streams.PrebindAnchor(a.Handle())
			must(t, err)
			s, err = streaming.OpenAnchorStream[[]byte](ctx, producer.Streams, a.Handle(), tk)
			must(t, err)
		} else {
			s, err = streaming.AttachAnchor[[]byte](ctx, producer.Streams, a.Handle())
			must(t, err)
		}
		must(t, s.Send(ctx, []byte("x")))
		must(t, s.Finalize())
		if v, err := a.Next(ctx); err != nil || string(v) != "x" {
			t.Fatalf("ticket=%v: Next = %q, %v", ticket, v, err)
		}
	}
}
