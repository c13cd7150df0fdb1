package streaming

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/streamsock"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/testnet"
	"github.com/velo-go/velo/messenger"
)

// The liveness clauses of the path suite: heartbeats, the watchdog, and
// the loss of either node. They wait on heartbeat windows of the default
// interval (5 s): in the bubble that costs no real time.
var lossClauses = []suiteClause{
	{name: "heartbeat-keeps-idle", run: clauseHeartbeatKeepsIdle},
	{name: "silent-producer-lost", remoteOnly: true, run: clauseSilentProducerLost},
}

func init() {
	// One clause per way a node goes away (t.Run cannot be called inside
	// a bubble, so the ways are clauses of their own).
	for _, way := range nodeLosses {
		prodSkip := func(p suitePath) bool { return way.messengerOnly && p.key == wire.TCPStreamKey }
		lossClauses = append(lossClauses,
			suiteClause{name: "producer-node-lost/" + way.name, remoteOnly: true, skip: prodSkip,
				run: func(t *testing.T, p suitePath) { clauseProducerNodeLost(t, p, way.name, way.kill) }},
			suiteClause{name: "consumer-node-lost/" + way.name, remoteOnly: true,
				run: func(t *testing.T, p suitePath) { clauseConsumerNodeLost(t, p, way.name, way.kill) }})
	}
}

// nodeKill makes the producer's node (prod) or the consumer's go away.
type nodeKill func(env *pathEnv, prod bool)

// The ways a node goes away. messengerOnly ways stop the node's messenger
// and leave its per-stream connections open: on the per-stream path the
// producer's stream then lives on (its connection is healthy and beats),
// so they are no producer loss there; they are for the consumer, whose
// producers hear the messenger's peer loss.
var nodeLosses = []struct {
	name          string
	messengerOnly bool
	kill          nodeKill
}{
	{name: "manager-close", kill: func(env *pathEnv, prod bool) { env.side(prod).m.Close() }},
	{name: "messenger-shutdown", messengerOnly: true, kill: func(env *pathEnv, prod bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		env.side(prod).msg.Shutdown(ctx)
	}},
	{name: "transport-shutdown", messengerOnly: true, kill: func(env *pathEnv, prod bool) { env.side(prod).tr.Shutdown() }},
	// A killed process: every socket of the node closes at once.
	{name: "host-kill", kill: func(env *pathEnv, prod bool) { env.side(prod).host.Kill() }},
}

// nodeSide is what one node of a remote path is made of.
type nodeSide struct {
	m    *Manager
	msg  *messenger.Messenger
	tr   *streamsock.Transport
	host *testnet.Host
}

func (env *pathEnv) side(prod bool) nodeSide {
	if prod {
		return nodeSide{env.prod, env.prodMsg, env.prodTr, env.prodHost}
	}
	return nodeSide{env.cons, env.consMsg, env.consTr, env.consHost}
}

// clauseProducerNodeLost: the producer's node goes away mid stream, with
// no terminal written. The consumer reads the items that arrived, then
// ErrSenderDropped within 100 ms of the loss, not at a heartbeat bound. The
// producer hears of it too (Cancelled), at the latest by a health check
// once per heartbeat window; after its own Manager closed, its Send fails
// with ErrCancelled and its output retires Discarded.
func clauseProducerNodeLost(t *testing.T, p suitePath, way string, kill nodeKill) {
	env := buildPath(t, p)
	a, s := suiteStream(t, env)
	ctx := context.Background()
	for _, v := range []string{"x", "y"} {
		if err := s.Send(ctx, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"x", "y"} {
		if v, err := suiteNext(a); err != nil || string(v) != want {
			t.Fatalf("Next = %q, %v", v, err)
		}
	}
	killed := time.Now()
	kill(env, true)
	_, err := suiteNextWithin(a, 10*defaultHeartbeatInterval)
	took := time.Since(killed)
	if !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("after the loss: %v, want ErrSenderDropped", err)
	}
	if took > 100*time.Millisecond {
		t.Fatalf("ErrSenderDropped %v after the producer's node went away, want within 100ms", took)
	}
	select {
	case <-s.Cancelled():
	case <-time.After(2*defaultHeartbeatInterval + 2*time.Second):
		t.Fatal("the producer was not cancelled by the loss")
	}
	if way != "manager-close" {
		return
	}
	if err := s.Send(ctx, []byte("z")); !errors.Is(err, ErrCancelled) {
		t.Fatalf("send after the producer's Manager closed: %v, want ErrCancelled", err)
	}
	s.Finalize()
	if out := retiredOutcome(t, s.Retired(), s); out != RetireDiscarded {
		t.Fatalf("retired %v after the producer's Manager closed, want Discarded", out)
	}
}

// clauseConsumerNodeLost: the consumer's node goes away; the producer
// hears it as Cancelled, and its Send fails with ErrCancelled. The
// context's cause tells the two kinds apart: a consumer's Manager that
// closed cancelled its streams (ErrCancelled); a node whose transport or
// sockets went away is lost (ErrConsumerLost); a messenger's orderly
// shutdown may read as either.
func clauseConsumerNodeLost(t *testing.T, p suitePath, way string, kill nodeKill) {
	env := buildPath(t, p)
	a, s := suiteStream(t, env)
	if err := s.Send(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if v, err := suiteNext(a); err != nil || string(v) != "x" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	kill(env, false)
	heard(t, s.Cancelled(), "the consumer's loss")
	cause := context.Cause(s.Context())
	switch way {
	case "manager-close":
		if !errors.Is(cause, ErrCancelled) {
			t.Fatalf("context cause = %v, want ErrCancelled", cause)
		}
	case "messenger-shutdown":
		// An orderly shutdown: the consumer's goodbye (a cancel) and the
		// peer's loss race, and either may come first.
		if !errors.Is(cause, ErrCancelled) && !errors.Is(cause, ErrConsumerLost) {
			t.Fatalf("context cause = %v, want ErrCancelled or ErrConsumerLost", cause)
		}
	default:
		if !errors.Is(cause, ErrConsumerLost) {
			t.Fatalf("context cause = %v, want ErrConsumerLost", cause)
		}
	}
	if err := s.Send(context.Background(), []byte("z")); !errors.Is(err, ErrCancelled) {
		t.Fatalf("send after the loss: %v, want ErrCancelled", err)
	}
}
