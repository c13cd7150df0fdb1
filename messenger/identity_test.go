package messenger_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// writeAs writes one fire-and-forget request to handler on conn, naming
// worker w as its sender.
func writeAs(t *testing.T, conn net.Conn, w ext.WorkerID, handler string, payload []byte) {
	t.Helper()
	hdr := wireRequestHeader(0, uint64(w), 0, handler, nil)
	_, err := conn.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: hdr, Payload: payload}))
	must(t, err)
}

// probeNode registers a fire handler on n that reports who sent each request.
func probeNode(t *testing.T, n *velo.Node) <-chan ext.WorkerID {
	t.Helper()
	senders := make(chan ext.WorkerID, 16)
	must(t, n.Register(velo.FireHandler("probe", func(c *velo.Context) { senders <- c.SenderWorkerID() })))
	return senders
}

// TestStrangerCannotSpeakAsAGoPeer: a raw connection that names a Go peer
// as its sender has its requests held while the node challenges the real
// peer, at the peer's own address; the stranger never sees the nonce, so
// the requests are refused and the handler never runs. The real peer is
// served as before.
func TestStrangerCannotSpeakAsAGoPeer(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	senders := probeNode(t, b)
	// a greets b, so b knows a as a Go peer, and a's own connection proves
	// itself (the list's request waits for it) before the short timeout.
	_, err := a.RemoteHandlers(ctx, b.InstanceID())
	must(t, err)
	defer messenger.SetProofTimeout(200 * time.Millisecond)()
	challenged := make(chan []byte, 4)
	a.Messenger().OnChallenge(func(body []byte) { challenged <- body })

	before := b.Messenger().IdentityStats()
	conn := rawConn(t, b)
	for range 3 {
		writeAs(t, conn, a.WorkerID(), "probe", nil)
	}
	recv(t, challenged, "the challenge to reach the real peer")
	waitFor(t, "the stranger's requests to be refused", func() bool {
		return b.Messenger().IdentityStats().Refused-before.Refused >= 3
	})
	select {
	case w := <-senders:
		t.Fatalf("the probe ran for a stranger speaking as %s", w)
	default:
	}
	// Later requests on the refused connection are refused at once.
	writeAs(t, conn, a.WorkerID(), "probe", nil)
	waitFor(t, "a request after the refusal to be refused", func() bool {
		return b.Messenger().IdentityStats().Refused-before.Refused >= 4
	})

	// The real peer's own connection proved itself and is served.
	must(t, a.Send(ctx, b.InstanceID(), "probe", nil))
	if w := recv(t, senders, "the real peer's probe"); w != a.WorkerID() {
		t.Fatalf("sender %s, want %s", w, a.WorkerID())
	}
	if st := b.Messenger().IdentityStats(); st.Held-before.Held < 3 || st.Challenged-before.Challenged < 1 {
		t.Fatalf("stats %+v (before %+v): the stranger's requests were not held for a challenge", st, before)
	}
}

// TestProvenConnectionIsBoundToOnePeer: a connection that proved it speaks
// for a peer runs that peer's requests; a request on it that names another
// worker is refused.
func TestProvenConnectionIsBoundToOnePeer(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	senders := probeNode(t, b)
	_, err := a.RemoteHandlers(ctx, b.InstanceID())
	must(t, err)
	conn := rawConn(t, b)
	proveAs(t, conn, a)
	writeAs(t, conn, a.WorkerID(), "probe", nil)
	if w := recv(t, senders, "the proven connection's probe"); w != a.WorkerID() {
		t.Fatalf("sender %s, want %s", w, a.WorkerID())
	}
	before := b.Messenger().IdentityStats()
	writeAs(t, conn, ext.WorkerID(12345), "probe", nil)
	waitFor(t, "the second identity to be refused", func() bool {
		return b.Messenger().IdentityStats().Mismatched > before.Mismatched
	})
	writeAs(t, conn, a.WorkerID(), "probe", nil) // the connection still speaks for a
	if w := recv(t, senders, "the probe after the refusal"); w != a.WorkerID() {
		t.Fatalf("sender %s, want %s", w, a.WorkerID())
	}
}

// TestGoPeersProveTheirConnections: between two Go nodes that know each
// other the proof runs by itself; calls succeed and nothing is refused.
func TestGoPeersProveTheirConnections(t *testing.T) {
	a, b := pair(t, nil, nil)
	must(t, b.RegisterPeer(a.PeerInfo())) // b knows a: a's connection must prove itself
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	for i := range 50 {
		got, err := a.Unary(ctx, b.InstanceID(), "echo", []byte{byte(i)})
		must(t, err)
		if len(got) != 1 || got[0] != byte(i) {
			t.Fatalf("call %d: got % x", i, got)
		}
	}
	st := b.Messenger().IdentityStats()
	if st.Proven < 1 || st.Refused != 0 || st.Mismatched != 0 {
		t.Fatalf("server identity stats %+v: want a proven connection and no refusal", st)
	}
}

// TestConnectionCloseRefusesWhatItHeld: requests held for a proof are
// refused as soon as their connection ends, not at the proof's timeout.
func TestConnectionCloseRefusesWhatItHeld(t *testing.T) {
	defer messenger.SetProofTimeout(time.Hour)()
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	_, err := a.RemoteHandlers(ctx, b.InstanceID())
	must(t, err)
	before := b.Messenger().IdentityStats()
	conn := rawConn(t, b)
	writeAs(t, conn, a.WorkerID(), "_list_handlers", nil)
	waitFor(t, "the request to be held", func() bool { return b.Messenger().IdentityStats().Held > before.Held })
	conn.Close()
	waitFor(t, "the held request to be refused", func() bool {
		st := b.Messenger().IdentityStats()
		return st.Refused > before.Refused && st.Conns <= before.Conns
	})
}

// TestPeersWithoutTheMarkAreTrusted: a peer whose address lacks the proof
// mark (a Rust 0.9 node) cannot answer a challenge, so its requests run as
// it names itself, as the reference runs them.
func TestPeersWithoutTheMarkAreTrusted(t *testing.T) {
	b := newNode(t)
	senders := probeNode(t, b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	ap := ln.Addr().(*net.TCPAddr)
	ep := tcp.EncodeEndpoint([]tcp.Interface{{IP: "127.0.0.1", Port: uint16(ap.Port), PrefixLen: 32}})
	rust := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{tcp.Key: ep}}
	conn := rawConn(t, b)
	body, err := json.Marshal(map[string]any{"peer_info": rust})
	must(t, err)
	writeAs(t, conn, rust.WorkerID(), "_hello", body)
	// The hello runs on a worker of its own: a probe sent before it is done
	// is refused as not greeted, so probe until one runs.
	waitFor(t, "the unmarked peer's probe", func() bool {
		writeAs(t, conn, rust.WorkerID(), "probe", nil)
		select {
		case w := <-senders:
			if w != rust.WorkerID() {
				t.Fatalf("sender %s, want %s", w, rust.WorkerID())
			}
			return true
		case <-time.After(10 * time.Millisecond):
			return false
		}
	})
	if st := b.Messenger().IdentityStats(); st.Challenged != 0 || st.Refused != 0 {
		t.Fatalf("stats %+v: an unmarked peer was challenged or refused", st)
	}
}

// TestHelloCannotMoveAKnownPeer: a hello that gives a known instance
// another endpoint is refused; this node's replies to that instance keep
// going where it registered.
func TestHelloCannotMoveAKnownPeer(t *testing.T) {
	sm := newMetrics(t)
	b := newNode(t, velo.WithMetrics(sm))
	endpoint := func() []byte {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		t.Cleanup(func() { ln.Close() })
		ap := ln.Addr().(*net.TCPAddr)
		return tcp.EncodeEndpoint([]tcp.Interface{{IP: "127.0.0.1", Port: uint16(ap.Port), PrefixLen: 32}})
	}
	real, forged := endpoint(), endpoint()
	peer := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{tcp.Key: real}}
	must(t, b.RegisterPeer(peer))
	conn := rawConn(t, b)
	moved := peer
	moved.Address = ext.WorkerAddress{tcp.Key: forged}
	body, err := json.Marshal(map[string]any{"peer_info": moved})
	must(t, err)
	writeAs(t, conn, peer.WorkerID(), "_hello", body)
	c := sm.DispatchFailures.WithLabelValues("identity", "hello_moves_address")
	waitFor(t, "the hello to be refused", func() bool { return testutil.ToFloat64(c) == 1 })
	got, ok := b.Messenger().PeerInfoOf(peer.WorkerID())
	if !ok || string(got.Address[tcp.Key]) != string(real) {
		t.Fatalf("after the hello the peer is %+v (%v), want its registered endpoint", got, ok)
	}
}

// TestSentinelKeepsItsIdentity: a sentinel made with NewSentinel that a
// handler returns, wrapped, matches on the caller with errors.Is.
func TestSentinelKeepsItsIdentity(t *testing.T) {
	errMine := messenger.NewSentinel(messenger.NotFound, "test_mine", "test: mine")
	errOther := messenger.NewSentinel(messenger.NotFound, "test_other", "test: other")
	a, b := pair(t, nil, nil)
	must(t, b.Register(velo.UnaryHandler("fail", func(*velo.Context) ([]byte, error) {
		return nil, fmt.Errorf("while failing: %w", errMine)
	})))
	_, err := a.Unary(testCtx(t), b.InstanceID(), "fail", nil)
	if !errors.Is(err, errMine) || errors.Is(err, errOther) || errors.Is(err, messenger.ErrLaneFull) {
		t.Fatalf("err %v: want it to match its own sentinel only", err)
	}
}

// TestHellosCannotGrowThePeerTable: hellos that name ever new instances
// are bounded like discovered peers; the least recently used is forgotten.
func TestHellosCannotGrowThePeerTable(t *testing.T) {
	const limit = 4
	b := newNode(t, velo.WithMaxDiscoveredPeers(limit))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	ap := ln.Addr().(*net.TCPAddr)
	ep := tcp.EncodeEndpoint([]tcp.Interface{{IP: "127.0.0.1", Port: uint16(ap.Port), PrefixLen: 32}})
	var first ext.WorkerID
	for i := range 3 * limit {
		// One connection per made-up instance: a connection speaks for one worker.
		conn := rawConn(t, b)
		info := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{tcp.Key: ep}}
		if i == 0 {
			first = info.WorkerID()
		}
		body, err := json.Marshal(map[string]any{"peer_info": info})
		must(t, err)
		writeAs(t, conn, info.WorkerID(), "_hello", body)
		waitFor(t, fmt.Sprintf("hello %d to register its instance", i), func() bool {
			_, ok := b.Messenger().PeerInfoOf(info.WorkerID())
			return ok
		})
	}
	waitFor(t, "the learned peers to be within the bound", func() bool { return b.Messenger().DiscoveredPeers() <= limit })
	if _, ok := b.Messenger().PeerInfoOf(first); ok {
		t.Fatalf("the first of %d instances introduced by hello is still kept, past a bound of %d", 3*limit, limit)
	}
}

// TestChallengeFloodIsBounded: anyone can send a challenge in a peer's
// name, and each answered one makes the node write to that peer; past a
// small rate per peer, challenges are counted and dropped.
func TestChallengeFloodIsBounded(t *testing.T) {
	sm := newMetrics(t)
	a, b := pair(t, []velo.Option{velo.WithMetrics(sm)}, nil)
	_, err := a.RemoteHandlers(testCtx(t), b.InstanceID())
	must(t, err)
	var answered atomic.Int64
	a.Messenger().OnChallenge(func([]byte) { answered.Add(1) })
	const flood = 300
	conn := rawConn(t, a)
	var out []byte
	for range flood {
		hdr := wireRequestHeader(0, uint64(b.WorkerID()), 0, "_velo_prove", nil)
		out = frame.Append(out, ext.Frame{Type: ext.Message, Header: hdr, Payload: make([]byte, 24)})
	}
	_, err = conn.Write(out)
	must(t, err)
	dropped := sm.DispatchFailures.WithLabelValues("identity", "challenges_over_rate")
	waitFor(t, "every challenge to be answered or dropped", func() bool {
		return answered.Load()+int64(testutil.ToFloat64(dropped)) == flood
	})
	// Two one-second windows at most, if the flood straddled a boundary.
	if n := answered.Load(); n > 2*64 {
		t.Fatalf("answered %d of %d challenges in one burst", n, flood)
	}
}

// TestFirstContactNeedsNoProof: the hello that introduces an unknown peer
// binds the connection it came on, so a burst of calls right behind the
// handshake waits for no proof (and none is held or dropped).
func TestFirstContactNeedsNoProof(t *testing.T) {
	a, b := pair(t, nil, nil) // b learns a from its hello
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	for i := range 20 {
		if _, err := a.Unary(ctx, b.InstanceID(), "echo", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if st := b.Messenger().IdentityStats(); st.Challenged != 0 || st.Held != 0 || st.Refused != 0 {
		t.Fatalf("server identity stats %+v: the first contact's connection was challenged", st)
	}
}

// TestOverTheHoldIsAnsweredThenDropped: requests past the hold's bound on
// a connection that must still prove itself are answered with
// ErrIdentityUnproven (a real peer's callers hear why at once), up to a
// bound per connection; past it they are only dropped, so a stranger's
// flood makes the node write to the peer it names a bounded number of
// times.
//
// The node also says so, once per 10 s however long the flood: a
// fire-and-forget request refused there is lost with no one told.
func TestOverTheHoldIsAnsweredThenDropped(t *testing.T) {
	defer messenger.SetProofTimeout(time.Hour)()
	logs := &logRecords{}
	a, b := pair(t, nil, []velo.Option{velo.WithLogger(slog.New(logs))})
	ctx := testCtx(t)
	_, err := a.RemoteHandlers(ctx, b.InstanceID())
	must(t, err)
	before := a.Messenger().UnmatchedReplies()
	conn := rawConn(t, b)
	const flood = 2048 + 256 + 500 // the hold, the answered, the dropped
	var out []byte
	for i := range flood {
		hdr := wireRequestHeader(byte(messenger.UnaryResponse), uint64(a.WorkerID()), uint64(i+1)<<16|1, "_list_handlers", nil)
		out = frame.Append(out, ext.Frame{Type: ext.Message, Header: hdr})
	}
	_, err = conn.Write(out)
	must(t, err)
	waitFor(t, "the flood to be held, answered or dropped", func() bool {
		st := b.Messenger().IdentityStats()
		return st.Held >= 2048 && a.Messenger().UnmatchedReplies()-before >= 256 && st.Refused >= 500
	})
	if n := a.Messenger().UnmatchedReplies() - before; n != 256 {
		t.Fatalf("the peer the flood named got %d answers, want 256", n)
	}
	if n := logs.containing("outgrew its hold"); n != 1 {
		t.Fatalf("the overflowing hold was logged %d times, want once", n)
	}
}
