package messenger_test

import (
	"sync"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/transport/tcp"
)

// followsTransport records, in order, the Follows hint of each frame of
// type typ handed to the wrapped transport.
type followsTransport struct {
	ext.Transport
	typ     ext.MessageType // the frames recorded
	mu      sync.Mutex
	follows []bool
}

func (f *followsTransport) Send(target ext.InstanceID, fr ext.Frame) (ext.SendOutcome, error) {
	if fr.Type == f.typ {
		f.mu.Lock()
		f.follows = append(f.follows, fr.Follows)
		f.mu.Unlock()
	}
	return f.Transport.Send(target, fr)
}

// A lone caller's requests never say that more follow: each goes out on
// the caller's goroutine when the writer is idle, not through a wake of
// the writer. A reply counted as waiting for its caller after the caller
// took it (slotTable.resuming) would mark every later request. Fails if
// the caller's wait does not take its reply off the count.
func TestLoneCallerRequestsDoNotFollow(t *testing.T) {
	inner, err := tcp.New()
	must(t, err)
	rec := &followsTransport{Transport: inner, typ: ext.Message}
	caller := newNodeOn(t, rec)
	server := newNode(t)
	must(t, caller.RegisterPeer(server.PeerInfo()))
	must(t, server.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return c.Payload, nil
	})))
	ctx := testCtx(t)
	for range 20 {
		if _, err := caller.Unary(ctx, server.InstanceID(), "echo", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	n := 0
	for _, f := range rec.follows {
		if f {
			n++
		}
	}
	if len(rec.follows) < 20 || n > 0 {
		t.Fatalf("%d of %d requests said more follow, want 0 of at least 20", n, len(rec.follows))
	}
}

// A spawn worker that answers a request with more queued behind it tells
// the transport that more answers follow (ext.Frame.Follows), so that its
// first answer does not leave alone in a write of its own; the last answer
// of the queue carries no hint, nor does one with nothing behind it. The
// handler runs one request at a time (WithMaxConcurrent(1)): the first
// request holds it until two more wait in its queue. Fails if the worker
// does not set the hint, or sets it on the last answer.
func TestSpawnAnswersFollowWhileRequestsWait(t *testing.T) {
	inner, err := tcp.New()
	must(t, err)
	rec := &followsTransport{Transport: inner, typ: ext.Response}
	server := newNodeOn(t, rec)
	caller := newNode(t)
	must(t, caller.RegisterPeer(server.PeerInfo()))
	ctx := testCtx(t)

	started, release := make(chan struct{}, 3), make(chan struct{})
	must(t, server.Register(velo.UnaryHandler("hold", func(c *velo.Context) ([]byte, error) {
		started <- struct{}{}
		if string(c.Payload) == "first" {
			<-release
		}
		return c.Payload, nil
	}, velo.WithMaxConcurrent(1))))
	// A call first, so the hello and the connections are up before the
	// timed part: its answer has nothing behind it.
	if _, err := caller.Unary(ctx, server.InstanceID(), "hold", []byte("warm")); err != nil {
		t.Fatal(err)
	}
	<-started

	errs := make(chan error, 3)
	call := func(p string) {
		_, err := caller.Unary(ctx, server.InstanceID(), "hold", []byte(p))
		errs <- err
	}
	go call("first")
	<-started // the first request holds the handler's one run
	go call("second")
	go call("third")
	testwait.Until(t, "the second and third requests to wait in the handler's queue", func() bool {
		queued, _ := server.Messenger().SpawnQueueStats("hold")
		return queued >= 2
	})
	close(release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// The node's own answers (the hello's) come first; then warm, first,
	// second and third.
	want := []bool{false, false, true, false}
	if len(rec.follows) < len(want) {
		t.Fatalf("%d answers recorded (%v), want at least %d", len(rec.follows), rec.follows, len(want))
	}
	got := rec.follows[len(rec.follows)-len(want):]
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Follows of the last answers in order: %v, want %v (all: %v)", got, want, rec.follows)
		}
	}
}
