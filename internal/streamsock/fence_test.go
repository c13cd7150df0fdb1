package streamsock

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
)

// fencedPair is pair with the receiver's address marked as a node that
// proves connections, so the sender's lanes to it start fenced.
func fencedPair(tb testing.TB) (tx, rx *testNode) {
	rx = newNode(tb, Config{})
	tx = newNode(tb, Config{})
	info := rx.info()
	info.Address[msgwire.ProofKey] = []byte{1}
	if err := tx.t.Register(info); err != nil {
		tb.Fatal(err)
	}
	return tx, rx
}

// sendRequests sends n requests of size bytes, each carrying its index,
// and returns their outcomes.
func sendRequests(t *testing.T, tx, rx *testNode, n, size int) []ext.SendOutcome {
	t.Helper()
	var outs []ext.SendOutcome
	for i := range n {
		p := make([]byte, size)
		binary.BigEndian.PutUint32(p, uint32(i))
		out, err := tx.t.SendOnLane(rx.id, 0, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: p})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	return outs
}

// receive pops n requests from rx and returns the connection they came on.
// Requests that carry an index (sendRequests) must come in order after
// *next, which it advances; pass nil for others.
func receive(t *testing.T, rx *testNode, n int, next *uint32) ext.ConnID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var conn ext.ConnID
	var batch []ext.InboundMessage
	for got := 0; got < n; {
		var err error
		if batch, err = rx.a.Messages().PopAll(ctx, batch[:0]); err != nil {
			t.Fatalf("received %d of %d: %v", got, n, err)
		}
		got += len(batch)
		if got > n {
			t.Fatalf("received %d, want %d", got, n)
		}
		conn = batch[0].Conn
		for _, m := range batch {
			if next == nil {
				continue
			}
			if i := binary.BigEndian.Uint32(m.Payload); i != *next {
				t.Fatalf("request %d arrived where %d was due", i, *next)
			}
			*next++
		}
		ext.DoneAll(batch)
	}
	return conn
}

func splitOutcomes(outs []ext.SendOutcome) (admitted int, pending []*ext.Admission) {
	for _, o := range outs {
		if o.Admitted() {
			admitted++
		} else {
			pending = append(pending, o.Admission())
		}
	}
	return admitted, pending
}

// A new connection to a node that proves connections takes at most the
// fence's budget of requests until the receiver confirms it; an urgent
// frame passes; the confirmation lets the rest go, in order.
func TestFenceHoldsRequestsUntilTheReceiverConfirms(t *testing.T) {
	tx, rx := fencedPair(t)
	const size = 8 << 10
	outs := sendRequests(t, tx, rx, 100, size) // 800 KiB, over the 256 KiB budget
	admitted, pending := splitOutcomes(outs)
	if want := fenceBudget / (size + 1 + 8 + fencePerFrame); admitted < want || admitted > want+1 || len(pending) == 0 {
		t.Fatalf("admitted %d of 100 before a confirmation, want about %d", admitted, want)
	}
	var next uint32
	conn := receive(t, rx, admitted, &next)
	if _, err := tx.t.SendOnLane(rx.id, 0, ext.Frame{Type: ext.Message, Header: []byte("proof"), Urgent: true}); err != nil {
		t.Fatal(err)
	}
	receive(t, rx, 1, nil) // the urgent frame, past the fence
	for _, a := range pending {
		select {
		case <-a.Done():
			t.Fatal("a send behind the fence was admitted before the confirmation")
		default:
		}
	}
	rx.t.ConfirmConn(conn)
	receive(t, rx, len(pending), &next)
	if st := tx.t.Stats(); st.FenceWaits != uint64(len(pending)) || st.FenceTimeouts != 0 {
		t.Fatalf("stats %+v: want %d fence waits and no timeout", st, len(pending))
	}
}

// A receiver that never confirms (one that does not know the dialer yet
// trusts the connection as it claims) does not hold the sends for good:
// the fence lifts after its timeout, and the lift is counted.
func TestFenceLiftsWhenNoConfirmationComes(t *testing.T) {
	defer func(d time.Duration) { fenceTimeout = d }(fenceTimeout)
	fenceTimeout = 50 * time.Millisecond
	tx, rx := fencedPair(t)
	outs := sendRequests(t, tx, rx, 100, 8<<10)
	admitted, pending := splitOutcomes(outs)
	if len(pending) == 0 {
		t.Fatal("no send waited at the fence")
	}
	var next uint32
	receive(t, rx, admitted+len(pending), &next)
	if st := tx.t.Stats(); st.FenceTimeouts != 1 {
		t.Fatalf("stats %+v: want one fence timeout", st)
	}
}

// Connections to a node without the mark (a Rust node) are never fenced.
func TestNoFenceWithoutTheMark(t *testing.T) {
	tx, rx := pair(t)
	outs := sendRequests(t, tx, rx, 100, 8<<10)
	if _, pending := splitOutcomes(outs); len(pending) != 0 {
		t.Fatalf("%d sends waited on an unfenced connection", len(pending))
	}
	var next uint32
	receive(t, rx, 100, &next)
}

// A small frame the fence lets through goes into the lane at once
// (sendSmall), fenced or not: a reply, which the fence does not count, and
// a request within its budget. A lane that carries only replies is never
// confirmed, so its fence stays up for its whole timeout; each reply took
// sendQueued's longer path all that time before.
func TestFencedLaneTakesSmallFramesAtOnce(t *testing.T) {
	tx, rx := fencedPair(t)
	var queued atomic.Int32
	tx.t.testQueuedHook = func() { queued.Add(1) }
	for i := range 10 {
		out, err := tx.t.SendOnLane(rx.id, 0, ext.Frame{Type: ext.Response, Header: []byte("h"), Payload: []byte{byte(i)}})
		if err != nil || !out.Admitted() {
			t.Fatalf("reply %d: %v, admitted %v", i, err, out.Admitted())
		}
	}
	outs := sendRequests(t, tx, rx, 10, 64)
	if admitted, _ := splitOutcomes(outs); admitted != 10 {
		t.Fatalf("%d of 10 small requests admitted within the fence's budget", admitted)
	}
	if !tx.t.laneFor(mustPeer(t, tx, rx.id), 0).gate.Fenced() {
		t.Fatal("the lane is not fenced: the test tests nothing")
	}
	if n := queued.Load(); n != 0 {
		t.Fatalf("%d of 20 small frames took sendQueued's path on a fenced lane", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 10 {
		f, err := rx.a.Responses().Pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Payload) != 1 || f.Payload[0] != byte(i) {
			t.Fatalf("reply %d arrived as %v", i, f.Payload)
		}
		f.Release()
	}
	var next uint32
	receive(t, rx, 10, &next)
}

func mustPeer(t *testing.T, tx *testNode, id ext.InstanceID) *peer {
	t.Helper()
	p, ok := tx.t.lookup(id)
	if !ok {
		t.Fatal("the peer is not registered")
	}
	return p
}
