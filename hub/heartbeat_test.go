package hub

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/transport/tcp"
)

func withProber(p prober) Option { return Option{func(o *options) { o.probe = p }} }

// touchLog is an InMemoryStore that lists a chosen peer first in Peers
// (so a serial round would probe it before the others) and records when
// each touch happens.
type touchLog struct {
	*store.InMemoryStore
	first ext.InstanceID
	mu    sync.Mutex
	at    map[ext.InstanceID]time.Time
}

func (s *touchLog) Peers() []store.PeerEntry {
	ps := s.InMemoryStore.Peers()
	slices.SortStableFunc(ps, func(a, b store.PeerEntry) int {
		if a.Peer.InstanceID == s.first {
			return -1
		}
		if b.Peer.InstanceID == s.first {
			return 1
		}
		return 0
	})
	return ps
}

func (s *touchLog) Touch(id ext.InstanceID, inc store.Incarnation) error {
	s.mu.Lock()
	s.at[id] = time.Now()
	s.mu.Unlock()
	return s.InMemoryStore.Touch(id, inc)
}

// TestStoppedPeerDelaysNoProbe: in one round, a peer that never answers
// (probed first) does not delay the others: on the bubble's clock, every
// other peer is touched at the round's start, and the stopped one's
// probe ends at one interval, as a failure.
func TestStoppedPeerDelaysNoProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := store.NewInMemoryStore()
		if err != nil {
			t.Fatal(err)
		}
		stopped := fakePeer()
		ts := &touchLog{InMemoryStore: mem, first: stopped.InstanceID, at: map[ext.InstanceID]time.Time{}}
		var others []ext.InstanceID
		for i := range 5 {
			p := fakePeer()
			if i == 0 {
				p = stopped
			} else {
				others = append(others, p.InstanceID)
			}
			if _, err := mem.Put(t.Context(), store.NewOpID(), store.Record{Peer: p, Epoch: 1}, 0); err != nil {
				t.Fatal(err)
			}
		}
		probe := func(ctx context.Context, e store.PeerEntry, done func(protocol.HeartbeatAnswer, error)) {
			if e.Peer.InstanceID == stopped.InstanceID {
				go func() { <-ctx.Done(); done(protocol.HeartbeatAnswer{}, ctx.Err()) }()
				return
			}
			go func() {
				time.Sleep(time.Millisecond) // a quick answer over the wire
				done(protocol.HeartbeatAnswer{OK: true}, nil)
			}()
		}
		cfg := testConfig()
		h, err := New(cfg, WithStore(ts), withProber(probe))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		failures := map[ext.InstanceID]failCount{}
		h.probeRound(context.Background(), failures)
		if end := time.Since(start); end != cfg.heartbeatInterval() {
			t.Fatalf("the round took %v on the bubble's clock, want one interval (%v)", end, cfg.heartbeatInterval())
		}
		for _, id := range others {
			at, ok := ts.at[id]
			if !ok || at.Sub(start) > time.Millisecond {
				t.Fatalf("a live peer was touched at +%v (touched %v): the stopped peer delayed it", at.Sub(start), ok)
			}
		}
		if _, ok := ts.at[stopped.InstanceID]; ok {
			t.Fatal("the stopped peer was touched")
		}
		if f := failures[stopped.InstanceID]; f.n != 1 {
			t.Fatalf("the stopped peer's failures: %+v, want 1", f)
		}
		mem.Close(context.Background())
	})
}

// TestVeloProbeDoesNotWait: the velo probe returns before the registrant
// answers (no goroutine waits for it); the answer arrives on done. The
// registrant's handler is released only after veloProbe has returned, so
// a probe that waited would time out and fail.
func TestVeloProbeDoesNotWait(t *testing.T) {
	h := startHub(t, testConfig(), veloTCP(t))
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
		n.Shutdown(ctx)
	})
	release := make(chan struct{})
	err = n.Register(velo.UnaryHandler(protocol.HeartbeatHandler, func(*velo.Context) ([]byte, error) {
		<-release
		return json.Marshal(protocol.HeartbeatAnswer{OK: true})
	}))
	if err != nil {
		t.Fatal(err)
	}
	reg := &registrant{node: n}
	if err := h.Node().RegisterPeer(reg.node.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan probeOutcome, 1)
	e := store.PeerEntry{Peer: reg.node.PeerInfo(), Epoch: 1}
	start := time.Now()
	h.veloProbe(ctx, e, func(a protocol.HeartbeatAnswer, err error) { got <- judge(start, a, err) })
	close(release)
	if o := <-got; !o.res.OK {
		t.Fatalf("probe: %+v", o.res)
	}
}
