package jsqueue_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/velo-go/velo/queue"
	"github.com/velo-go/velo/queue/jsqueue"
	"github.com/velo-go/velo/queue/queuetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ackWait is short so that crash tests finish quickly (the victim's held
// items come back after it), and long enough that a healthy receiver always
// acknowledges within it, even on a loaded CI machine.
const ackWait = 3 * time.Second

func backend(t testing.TB, cfg jsqueue.Config) *jsqueue.Backend {
	t.Helper()
	b, err := jsqueue.New(startServer(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSuite(t *testing.T) {
	// Batch 1: a receiver then holds no item it has not handed out. The
	// crash case's workers pause, between two Receive calls, until the
	// victim stops; with a batch of 32 in hand their items' ack wait ran
	// on during the pause, and a pause longer than ackWait on a loaded CI
	// machine had those items delivered again and acknowledged twice.
	cfg := jsqueue.Config{ClusterID: "suite", Capacity: 8, AckWait: ackWait, Batch: 1}
	queuetest.Run(t, queuetest.Harness{
		New:        func(t *testing.T) queue.Backend { return backend(t, cfg) },
		Capacity:   8,
		Redelivers: true,
		AckWait:    ackWait,
	})
}

// TestNames pins the stream, subject and consumer names to the Rust
// reference's, so that Go and Rust nodes meet on one queue.
func TestNames(t *testing.T) {
	if got := jsqueue.StreamName("c1", "jobs.high"); got != "c1_jobs_high" {
		t.Errorf("stream %q", got)
	}
	if got := jsqueue.Subject("c1", "jobs.high"); got != "c1.queue.jobs.high" {
		t.Errorf("subject %q", got)
	}
	if got := jsqueue.ConsumerName("c1", "jobs.high"); got != "c1_jobs_high_worker" {
		t.Errorf("consumer %q", got)
	}
}

// TestStreamConfig checks what a queue looks like on the server: WorkQueue
// retention, one subject, a durable consumer with explicit ack.
func TestStreamConfig(t *testing.T) {
	nc := startServer(t)
	b, err := jsqueue.New(nc, jsqueue.Config{ClusterID: "c1", AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	ctx := queuetest.Ctx(t)
	if _, err := queue.NewSender[int](ctx, b, "jobs"); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, "c1_jobs")
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	if sc.Retention != jetstream.WorkQueuePolicy || len(sc.Subjects) != 1 || sc.Subjects[0] != "c1.queue.jobs" {
		t.Fatalf("stream config %+v", sc)
	}
	c, err := s.Consumer(ctx, "c1_jobs_worker")
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CachedInfo().Config
	if cc.Durable != "c1_jobs_worker" || cc.AckPolicy != jetstream.AckExplicitPolicy || cc.AckWait != ackWait {
		t.Fatalf("consumer config %+v", cc)
	}
}

// TestTenThousandThroughCrash is the must-show of issue 14: 10,000 items
// through three competing receivers, one of which stops mid-run holding
// items it never acknowledged (its own five, plus whatever its last pull
// brought). Every item must be processed at least once and acknowledged
// exactly once, and the stream must end empty with nothing pending.
func TestTenThousandThroughCrash(t *testing.T) {
	nc := startServer(t)
	b, err := jsqueue.New(nc, jsqueue.Config{ClusterID: "must", AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	r := queuetest.Crash(t, b, "show", queuetest.CrashConfig{Items: 10000, Receivers: 3, KillAfter: 1000, Hold: 5})
	t.Logf("JetStream crash run: %s", r)
	if r.Deliveries <= int64(r.Items) {
		t.Errorf("no redelivery seen: the victim held nothing? %s", r)
	}
	assertDrained(t, nc, "must_show", "must_show_worker")
}

// assertDrained checks on the server that the queue ended empty: no item
// stored, none pending for the consumer, none waiting for an ack.
func assertDrained(t *testing.T, nc *nats.Conn, stream, consumer string) {
	t.Helper()
	ctx := queuetest.Ctx(t)
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Consumer(ctx, consumer)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server: stream msgs=%d, consumer pending=%d ack_pending=%d redelivered=%d",
		si.State.Msgs, ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
	if si.State.Msgs != 0 || ci.NumPending != 0 || ci.NumAckPending != 0 {
		t.Fatal("queue not drained")
	}
}
