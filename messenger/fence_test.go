package messenger_test

import (
	"encoding/binary"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// TestABurstOnANewConnectionOutlastsItsProof: a Go node fires 2 MiB of
// fire-and-forget requests on a connection it has just opened to a Go
// node that must hold them until the connection proves whose it is, four
// times what the receiver holds. The challenge's answer is held up until
// every request was sent, so without the dialer's fence the whole burst
// would be on the wire ahead of the proof and the receiver would refuse,
// and lose, most of it. With the fence the burst waits one round trip
// past its first 256 KiB, and every request arrives.
func TestABurstOnANewConnectionOutlastsItsProof(t *testing.T) {
	burstOutlastsProof(t, func(tr *tcp.Transport) ext.Transport { return tr })
}

// TestAWrappedTransportStillConfirmsItsConnections is the same burst to a
// receiver whose transport is wrapped, as a user counting or tracing
// frames wraps it. The wrapper unwraps (ext.TransportWrapper), so the
// receiver finds the ConnConfirmer underneath and the dialer's fence lifts
// on the confirmation, not on its timeout.
func TestAWrappedTransportStillConfirmsItsConnections(t *testing.T) {
	burstOutlastsProof(t, func(tr *tcp.Transport) ext.Transport { return unwrapping{tr} })
}

// TestATransportThatCannotConfirmIsNamedAtStart: a wrapper that hides the
// ConnConfirmer of a tcp transport makes every busy connection to the node
// wait out its dialer's fence, so the node says so when it starts.
func TestATransportThatCannotConfirmIsNamedAtStart(t *testing.T) {
	tr, err := tcp.New()
	must(t, err)
	logs := &logRecords{}
	newNodeOn(t, hiding{tr}, velo.WithLogger(slog.New(logs)))
	if n := logs.containing("cannot confirm the connections it accepts"); n != 1 {
		t.Fatalf("%d warnings about the wrapped transport, want 1", n)
	}
	logs = &logRecords{}
	newNodeOn(t, unwrapping{mustTCP(t)}, velo.WithLogger(slog.New(logs)))
	if n := logs.containing("cannot confirm"); n != 0 {
		t.Fatalf("%d warnings about a wrapper that unwraps, want none", n)
	}
}

// hiding wraps a transport and hides its optional interfaces.
type hiding struct{ ext.Transport }

// unwrapping is hiding that names what it wraps.
type unwrapping struct{ ext.Transport }

func (u unwrapping) Unwrap() ext.Transport { return u.Transport }

func mustTCP(t *testing.T) *tcp.Transport {
	t.Helper()
	tr, err := tcp.New()
	must(t, err)
	return tr
}

// burstOutlastsProof fires the burst of TestABurstOnANewConnectionOutlastsItsProof
// at a receiver whose transport is wrap(tcp).
func burstOutlastsProof(t *testing.T, wrap func(*tcp.Transport) ext.Transport) {
	defer messenger.SetProofTimeout(time.Hour)()
	const (
		size  = 8 << 10
		count = 256 // 2 MiB
		lane  = 1   // a connection opened for the burst; lane 0 carried the hello
	)
	atr, err := tcp.New(tcp.WithLanes(2))
	must(t, err)
	btr, err := tcp.New(tcp.WithLanes(2))
	must(t, err)
	logs := &logRecords{}
	a := newNodeOn(t, atr)
	b := newNodeOn(t, wrap(btr), velo.WithLogger(slog.New(logs)))
	must(t, a.RegisterPeer(b.PeerInfo()))
	must(t, b.RegisterPeer(a.PeerInfo())) // b knows a: a's connections must prove
	ctx := testCtx(t)
	_, err = a.RemoteHandlers(ctx, b.InstanceID()) // lane 0 is up and proven
	must(t, err)

	// Fire handlers may run in parallel, so what is checked is that each
	// request arrived once, whole; the transport's tests check its order.
	var got atomic.Int64
	var seen [count]atomic.Int32
	var damaged atomic.Int64
	all := make(chan struct{})
	must(t, msgrx.RegisterSystem(b.Messenger(), messenger.FireHandler("_burst_probe", func(c *messenger.Context) {
		if i := binary.BigEndian.Uint64(c.Payload); len(c.Payload) != size || i >= count || seen[i].Add(1) != 1 {
			damaged.Add(1)
		}
		if got.Add(1) == count {
			close(all)
		}
	})))

	sent := make(chan struct{})
	a.Messenger().OnChallenge(func([]byte) { <-sent })
	pending := 0
	for i := range count {
		p := make([]byte, size)
		binary.BigEndian.PutUint64(p, uint64(i))
		out, err := msgrx.PostLaneOutcome(a.Messenger(), b.InstanceID(), lane, "_burst_probe", p)
		must(t, err)
		if !out.Admitted() {
			pending++
		}
	}
	close(sent)
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("%d of %d requests arrived (refused: %d)", got.Load(), count, b.Messenger().IdentityStats().Refused)
	}
	if n := damaged.Load(); n != 0 {
		t.Fatalf("%d requests arrived twice or damaged", n)
	}
	if pending == 0 {
		t.Fatal("no send waited at the new connection's fence")
	}
	if st := atr.Stats(); st.FenceWaits == 0 || st.FenceTimeouts != 0 {
		t.Fatalf("dialer stats %+v: want sends that waited at the fence and no timeout", st)
	}
	if st := b.Messenger().IdentityStats(); st.Refused != 0 {
		t.Fatalf("receiver identity stats %+v: refused part of the burst", st)
	}
	if n := logs.containing("outgrew its hold"); n != 0 {
		t.Fatalf("the receiver's hold overflowed (%d warnings)", n)
	}
}

// TestAConnectionTrustedBeforeItsPeerWasKnownIsChallengedAtTheHello: a
// connection that spoke for a worker the node did not know yet was trusted
// as it claimed. When that worker's hello introduces it as a Go peer, the
// node challenges the connection at once, without waiting for another
// request on it: a Go dialer waits for that connection's confirmation,
// and a stranger's connection in the peer's name must not stay trusted.
func TestAConnectionTrustedBeforeItsPeerWasKnownIsChallengedAtTheHello(t *testing.T) {
	a, b := pair(t, nil, nil) // b does not know a yet
	ran := make(chan struct{}, 1)
	must(t, msgrx.RegisterSystem(b.Messenger(), messenger.FireHandler("_trust_probe", func(*messenger.Context) { ran <- struct{}{} })))
	conn := rawConn(t, b)
	writeAs(t, conn, a.WorkerID(), "_trust_probe", nil)
	recv(t, ran, "the probe of a worker b does not know")
	challenged := make(chan []byte, 4)
	a.Messenger().OnChallenge(func(body []byte) { challenged <- body })
	_, err := a.RemoteHandlers(testCtx(t), b.InstanceID()) // the hello: b learns a
	must(t, err)
	recv(t, challenged, "the challenge for the connection trusted before the hello")
	if st := b.Messenger().IdentityStats(); st.Challenged != 1 {
		t.Fatalf("identity stats %+v: want exactly the one trusted connection challenged", st)
	}
}
