package msgqueue_test

import (
	"context"
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
