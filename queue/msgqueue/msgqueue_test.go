package msgqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/queue"
	"github.com/velo-go/velo/queue/msgqueue"
	"github.com/velo-go/velo/queue/queuetest"
	"github.com/velo-go/velo/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ackWait = 300 * time.Millisecond

func newNode(t *testing.T) *velo.Node {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return n
}

var cfg = msgqueue.Config{Capacity: 8, AckWait: ackWait, PollWait: 200 * time.Millisecond}

// remoteBackend starts an owner node with the actor and a client node that
// reaches it with active messages.
func remoteBackend(t *testing.T) queue.Backend {
	owner, client := newNode(t), newNode(t)
	if _, err := msgqueue.Serve(owner.Messenger(), msgqueue.ServiceConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := client.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return msgqueue.New(client.Messenger(), owner.InstanceID(), cfg)
}

func TestSuiteRemote(t *testing.T) {
	queuetest.Run(t, queuetest.Harness{New: remoteBackend, Capacity: 8, Redelivers: true, AckWait: ackWait})
}

func TestSuiteLocal(t *testing.T) {
	queuetest.Run(t, queuetest.Harness{
		New: func(t *testing.T) queue.Backend {
			s := msgqueue.NewService(msgqueue.ServiceConfig{})
			t.Cleanup(s.Close)
			return s.Backend(cfg)
		},
		Capacity: 8, Redelivers: true, AckWait: ackWait,
	})
}

// TestReferenceBodies talks to the actor with the exact JSON bodies a Rust
// node sends (Enqueue, then RecvPoll, which takes the item at once without
// a lease) and checks the exact answers, so a Rust sender or receiver can
// use a Go owner.
func TestReferenceBodies(t *testing.T) {
	owner, client := newNode(t), newNode(t)
	if _, err := msgqueue.Serve(owner.Messenger(), msgqueue.ServiceConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := client.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx := queuetest.Ctx(t)
	steps := []struct{ req, want string }{
		{`{"Enqueue":{"queue":"jobs","data":[146,1,164,119,111,114,107],"capacity":null}}`, `"Ack"`},
		{`{"RecvPoll":{"queue":"jobs","capacity":null,"poll_timeout_ms":50}}`, `{"Item":[146,1,164,119,111,114,107]}`},
		{`{"RecvPoll":{"queue":"jobs","capacity":null,"poll_timeout_ms":50}}`, `"Empty"`},
	}
	for _, s := range steps {
		got, err := client.Unary(ctx, owner.InstanceID(), msgqueue.Handler, []byte(s.req))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != s.want {
			t.Fatalf("%s: got %s, want %s", s.req, got, s.want)
		}
	}
}

// TestLeaseLost: a receiver that holds an item past the ack wait loses it
// to another receiver, and its late Ack says so (ErrLeaseLost) instead of
// pretending to be the one acknowledgement.
func TestLeaseLost(t *testing.T) {
	s := msgqueue.NewService(msgqueue.ServiceConfig{})
	defer s.Close()
	b := s.Backend(msgqueue.Config{AckWait: 50 * time.Millisecond, PollWait: 100 * time.Millisecond})
	ctx := queuetest.Ctx(t)
	tx, _ := queue.NewSender[int](ctx, b, "q")
	slow, _ := queue.NewReceiver[int](ctx, b, "q")
	fast, _ := queue.NewReceiver[int](ctx, b, "q")
	if err := tx.Send(ctx, 1); err != nil {
		t.Fatal(err)
	}
	held, err := slow.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := fast.Receive(ctx) // comes once the lease of slow expires
	if err != nil || again.Value != 1 {
		t.Fatalf("redelivery: %v %v", again, err)
	}
	if err := again.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Ack(ctx); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("late Ack: %v, want ErrLeaseLost", err)
	}
}

// A poll whose caller is gone stops waiting with it: it used to wait out
// its poll timeout (up to 5 s) on a context of its own, and an item sent
// meanwhile went to it, was answered to nobody and was lost (a RecvPoll
// takes an item without a lease). Now the poll ends with the caller's
// deadline, and the item goes to the next poll.
func TestAPollWhoseCallerIsGoneTakesNothing(t *testing.T) {
	owner, client := newNode(t), newNode(t)
	s, err := msgqueue.Serve(owner.Messenger(), msgqueue.ServiceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx := queuetest.Ctx(t)
	long := []byte(`{"RecvPoll":{"queue":"jobs","capacity":null,"poll_timeout_ms":5000}}`)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	got, err := client.Unary(short, owner.InstanceID(), msgqueue.Handler, long)
	cancel()
	// The handler's deadline is a hair before the caller's, so an "Empty"
	// may still come back in time; either way the poll is over.
	if err == nil && string(got) != `"Empty"` {
		t.Fatalf("a poll of an empty queue answered %s", got)
	}
	until := time.Now().Add(2 * time.Second) // well under the 5 s poll
	for s.Polling() != 0 {
		if time.Now().After(until) {
			t.Fatal("the poll still waits after its caller gave up")
		}
		time.Sleep(time.Millisecond)
	}
	steps := []struct{ req, want string }{
		{`{"Enqueue":{"queue":"jobs","data":[1],"capacity":null}}`, `"Ack"`},
		{`{"RecvPoll":{"queue":"jobs","capacity":null,"poll_timeout_ms":50}}`, `{"Item":[1]}`},
	}
	for _, st := range steps {
		got, err := client.Unary(ctx, owner.InstanceID(), msgqueue.Handler, []byte(st.req))
		if err != nil || string(got) != st.want {
			t.Fatalf("%s: got %s, %v; want %s", st.req, got, err, st.want)
		}
	}
}
