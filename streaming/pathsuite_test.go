package streaming

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamsock"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/testnet"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// The path suite: one test per clause of the stream contract, each run
// over every path a producer can take to an anchor: the same worker (the
// local inlet), the per-stream TCP connection, and the messenger mux
// (TestPathSuite/<clause>/<path>).
//
// Every case runs in a testing/synctest bubble, so what waits on time
// (heartbeat windows, the watchdog, a Next with a deadline) runs on the
// bubble's clock and takes no real time. For that, the two nodes of the
// remote paths talk over internal/testnet, an in-memory network of
// net.Pipe connections, and not over loopback TCP: a goroutine blocked on
// a real socket is not durably blocked, and the bubble's clock would not
// move while one is. The messenger transport is the same stream-socket
// transport as TCP's (internal/streamsock) over that network, and the
// per-stream path listens and dials on it through withStreamNet.

// suitePath is one way from a producer to an anchor.
type suitePath struct {
	name   string
	remote bool   // the producer is on another node
	key    string // the transport a remote attach negotiates
	limit  int    // the largest frame a remote Send takes
	opts   []ManagerOption
}

var suitePaths = []suitePath{
	{name: "same-worker"},
	{name: "per-stream", remote: true, key: wire.TCPStreamKey, limit: wire.MaxTCPFrame, opts: []ManagerOption{WithMux(MuxConfig{Disabled: true})}},
	{name: "mux", remote: true, key: mux.WireKey, limit: mux.MaxMuxRecord, opts: []ManagerOption{WithMux(MuxConfig{}), WithMuxOnly()}},
}

// pathEnv is a consumer-side and a producer-side Manager joined by one
// path: the same Manager on the same worker.
type pathEnv struct {
	path       suitePath
	cons, prod *Manager
	// Remote paths only:
	net                *testnet.Net
	consHost, prodHost *testnet.Host
	consMsg, prodMsg   *messenger.Messenger
	consTr, prodTr     *streamsock.Transport
}

// buildPath makes p's Managers inside the bubble of t; everything is
// closed when t ends (its cleanups run inside the bubble).
func buildPath(t *testing.T, p suitePath, opts ...ManagerOption) *pathEnv {
	t.Helper()
	env := &pathEnv{path: p}
	if !p.remote {
		m := newTestManager(t)
		env.cons, env.prod = m, m
		return env
	}
	env.net = testnet.New()
	env.consHost, env.prodHost = env.net.Host(), env.net.Host()
	env.consMsg, env.consTr = memMessenger(t, env.consHost)
	env.prodMsg, env.prodTr = memMessenger(t, env.prodHost)
	all := slices.Concat([]ManagerOption{WithStreamLogger(quietLog)}, p.opts, opts)
	env.cons = memNodeManager(t, env.consMsg, slices.Concat(all, []ManagerOption{withStreamNet(env.consHost)}))
	env.prod = memNodeManager(t, env.prodMsg, slices.Concat(all, []ManagerOption{withStreamNet(env.prodHost)}))
	// Only the producer knows the consumer, as when the handle came in a
	// request: the attach introduces the producer.
	if err := env.prodMsg.RegisterPeer(env.consMsg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return env
}

// quietLog drops the nodes' logs: a suite of many small node pairs would
// bury a failure in peer-connected lines.
var quietLog = slog.New(slog.DiscardHandler)

// memMessenger is a messenger on host h of the in-memory network, shut
// down when the test ends.
func memMessenger(t *testing.T, h *testnet.Host) (*messenger.Messenger, *streamsock.Transport) {
	t.Helper()
	tr, err := h.Transport()
	if err != nil {
		t.Fatal(err)
	}
	msg, err := messenger.New(context.Background(), messenger.Config{Transports: []ext.Transport{tr}, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		msg.Shutdown(ctx)
	})
	return msg, tr
}

func memNodeManager(t *testing.T, msg *messenger.Messenger, opts []ManagerOption) *Manager {
	t.Helper()
	sm, err := NewNodeManager(msg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sm.Close() })
	return sm
}

// holdProducer stalls everything the producer's node sends to the
// consumer's (messenger and per-stream connections), leaving the
// connections open: a producer that went silent. The hold ends as the
// test does, before its nodes close.
func (env *pathEnv) holdProducer(t *testing.T) {
	t.Cleanup(env.net.Release)
	for _, ep := range env.consMsg.PeerInfo().Address {
		env.net.Hold(string(ep))
	}
	if a := env.cons.streamAddr(); a != nil {
		env.net.Hold(a.String())
	}
}

// suiteClause is one clause of the contract; remoteOnly clauses have no
// meaning on the same worker, and skip, when set, names other paths where
// a clause does not apply (with the reason at the clause).
type suiteClause struct {
	name       string
	remoteOnly bool
	skip       func(suitePath) bool
	run        func(t *testing.T, p suitePath)
}

// TestPathSuite runs every clause over every path it applies to.
func TestPathSuite(t *testing.T) {
	clauses := [][]suiteClause{streamClauses, controlClauses, lossClauses, mpscClauses}
	for _, group := range clauses {
		for _, c := range group {
			t.Run(c.name, func(t *testing.T) {
				for _, p := range suitePaths {
					if (c.remoteOnly && !p.remote) || (c.skip != nil && c.skip(p)) {
						continue
					}
					t.Run(p.name, func(t *testing.T) {
						if p.key == mux.WireKey && muxDisabledByEnv() {
							t.Skip(muxDisableEnv + " is set: no mux to test")
						}
						synctest.Test(t, func(t *testing.T) { c.run(t, p) })
					})
				}
			})
		}
	}
}

// suiteAttach attaches a []byte producer on env.prod; the Sender is
// closed when the test ends.
func suiteAttach(t *testing.T, env *pathEnv, h AnchorHandle) *Sender[[]byte] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := AttachAnchor[[]byte](ctx, env.prod, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if env.path.remote {
		if got := s.NegotiatedTransport(); got != env.path.key {
			t.Fatalf("NegotiatedTransport = %q, want %q", got, env.path.key)
		}
	}
	return s
}

// suiteStream is an anchor on env.cons with a producer attached.
func suiteStream(t *testing.T, env *pathEnv, opts ...AnchorOption) (*Anchor[[]byte], *Sender[[]byte]) {
	t.Helper()
	a, err := CreateAnchor[[]byte](env.cons, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, suiteAttach(t, env, a.Handle())
}

// suiteNext is Next bounded by 10 s of the bubble's clock: a frame that
// never comes fails the test at once instead of hanging it.
func suiteNext(a *Anchor[[]byte]) ([]byte, error) { return suiteNextWithin(a, 10*time.Second) }

// suiteNextWithin is Next bounded by d of the bubble's clock.
func suiteNextWithin(a *Anchor[[]byte], d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return a.Next(ctx)
}

// heard waits (on the bubble's clock) for ch to close.
func heard(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10 s", what)
	}
}

// notYet reports whether ch is still open, once the bubble is idle.
func notYet(ch <-chan struct{}) bool {
	synctest.Wait()
	select {
	case <-ch:
		return false
	default:
		return true
	}
}
