package hub

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/storetest"
)

// TestUnregisterThatFailsKeepsTheRegistration: a DELETE whose remove the
// store refuses answers unavailable and leaves the registration as it
// was: its credential still heartbeats and can retry the DELETE.
func TestUnregisterThatFailsKeepsTheRegistration(t *testing.T) {
	fs, err := storetest.NewFaultStore()
	if err != nil {
		t.Fatal(err)
	}
	h := startHub(t, testConfig(), WithStore(fs))
	p := fakePeer()
	r := register(t, h, p, "", nil)
	fs.Inject(storetest.OpRemove, storetest.Fault{Err: errors.New("refused"), Times: 1})
	st, b := call(t, "DELETE", ctl(h)+protocol.InstancePath(p.InstanceID), nil, r.Credential)
	wantCode(t, "a refused remove", st, b, protocol.CodeUnavailable, 503)
	if st, b := call(t, "POST", ctl(h)+protocol.HeartbeatPath(p.InstanceID), nil, r.Credential); st != 200 {
		t.Fatalf("heartbeat after a refused unregister: %d %s", st, b)
	}
	if st, b := call(t, "DELETE", ctl(h)+protocol.InstancePath(p.InstanceID), nil, r.Credential); st != 204 {
		t.Fatalf("retried unregister: %d %s", st, b)
	}
}

// TestUnregisterWhileARemovalIsQueued: the entry left the store (the hook
// revoked it and queued the delivery) while the lifecycle could not take
// the lock; a DELETE that runs first answers busy (the owner's removal is
// in progress), one that runs after the delivery answers not_found.
// Either way the removal is delivered, the owner ends free, and it
// registers again.
func TestUnregisterWhileARemovalIsQueued(t *testing.T) {
	rec := newRecorder("rec")
	h := startHub(t, testConfig(), WithExtension(rec))
	p := fakePeer()
	r := register(t, h, p, "", svc("q"))
	e, _ := h.Store().Get(p.InstanceID)
	h.lock <- struct{}{} // hold the lock: the lifecycle cannot deliver
	if err := h.Store().Remove(context.Background(), p.InstanceID, e.Incarnation); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Authority().Authorize(p.InstanceID, r.Credential); !errors.Is(err, protocol.CodeBusy) {
		t.Fatalf("authorize with the removal queued: %v, want busy at once", err)
	}
	type answer struct {
		st int
		b  []byte
	}
	got := make(chan answer, 1)
	go func() {
		st, b := call(t, "DELETE", ctl(h)+protocol.InstancePath(p.InstanceID), nil, r.Credential)
		got <- answer{st, b}
	}()
	<-h.lock
	a := <-got
	if code := decodeErr(t, a.b).Code; code != protocol.CodeBusy && code != protocol.CodeNotFound {
		t.Fatalf("unregister with a removal queued: %d %s", a.st, a.b)
	}
	if x := rec.waitRemoved(t, p.InstanceID); x.inc != e.Incarnation {
		t.Fatalf("delivered %+v, want incarnation %d", x, e.Incarnation)
	}
	waitUnlocked(h)
	if g := h.auth.get(p.InstanceID); g != nil {
		t.Fatalf("the owner is not free: %+v", g)
	}
	if len(members(t, h, "q")) != 0 {
		t.Fatal("the removed owner still serves q")
	}
	register(t, h, p, "", nil)
}

// TestLateDeliveryKeepsTheReplacement: a removal of an old incarnation
// delivered after a later registration of the same instance (the hook's
// second copy of an unregistration) changes nothing of the replacement:
// its credential authorizes and its services stay.
func TestLateDeliveryKeepsTheReplacement(t *testing.T) {
	h := startHub(t, testConfig())
	p := fakePeer()
	r1 := register(t, h, p, "", nil)
	e1, _ := h.Store().Get(p.InstanceID)
	if st, b := call(t, "DELETE", ctl(h)+protocol.InstancePath(p.InstanceID), nil, r1.Credential); st != 204 {
		t.Fatalf("unregister: %d %s", st, b)
	}
	r2 := register(t, h, p, "", svc("late"))
	h.rem.push(store.Removal{Peer: p, Incarnation: e1.Incarnation}) // the late copy
	waitUnlocked(h)
	h.rem.push(store.Removal{Peer: p, Incarnation: e1.Incarnation})
	waitUnlocked(h)
	if _, err := h.Authority().Authorize(p.InstanceID, r2.Credential); err != nil {
		t.Fatalf("the replacement after a late delivery: %v", err)
	}
	if len(members(t, h, "late")) != 1 {
		t.Fatal("a late delivery dropped the replacement's services")
	}
}

// slowRegistered is an extension whose OnRegistered does not return until
// released, past any deadline; it reports the context it got.
type slowRegistered struct {
	BaseExtension
	release chan struct{}
	ctxErr  chan error
}

func (s *slowRegistered) Name() string { return "slow" }

func (s *slowRegistered) OnRegistered(ctx context.Context, _ *Registration) {
	<-s.release
	s.ctxErr <- ctx.Err()
}

// TestOnRegisteredOverrunIsDropped: an on_registered that overruns
// step_timeout_ms is dropped at the deadline (its context ends) and the
// registration still answers, with a credential that works. The hook is
// released only after the answer came, so a hub that waited for it
// would never answer.
func TestOnRegisteredOverrunIsDropped(t *testing.T) {
	cfg := testConfig()
	cfg.StepTimeoutMS = 50
	slow := &slowRegistered{release: make(chan struct{}), ctxErr: make(chan error, 1)}
	h := startHub(t, cfg, WithExtension(slow))
	p := fakePeer()
	r := register(t, h, p, "", nil)
	if _, err := h.Authority().Authorize(p.InstanceID, r.Credential); err != nil {
		t.Fatalf("the credential after an on_registered overran: %v", err)
	}
	close(slow.release)
	if err := <-slow.ctxErr; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("on_registered's context after the deadline: %v", err)
	}
}

// startOrder records Start, StopBackground and Shutdown of extensions;
// the one named panicky panics in Start.
type startOrder struct {
	mu     sync.Mutex
	events []string
}

func (o *startOrder) add(s string) { o.mu.Lock(); o.events = append(o.events, s); o.mu.Unlock() }

type orderedExt struct {
	BaseExtension
	name  string
	req   []string
	log   *startOrder
	panic bool
}

func (e *orderedExt) Name() string       { return e.name }
func (e *orderedExt) Requires() []string { return e.req }
func (e *orderedExt) Start(context.Context) error {
	if e.panic {
		panic("orderedExt: start panics on request")
	}
	e.log.add("start " + e.name)
	return nil
}
func (e *orderedExt) StopBackground()                { e.log.add("stop " + e.name) }
func (e *orderedExt) Shutdown(context.Context) error { e.log.add("shutdown " + e.name); return nil }

// TestStartupPanicUndoesInReverse: an extension that panics in Start
// fails Serve; the extensions started before it stop in reverse start
// order, the listeners are closed (their ports bind again), and the store
// can go to another hub.
func TestStartupPanicUndoesInReverse(t *testing.T) {
	log := &startOrder{}
	a := &orderedExt{name: "a", log: log}
	b := &orderedExt{name: "b", req: []string{"a"}, log: log}
	c := &orderedExt{name: "c", req: []string{"b"}, log: log, panic: true}
	st, err := store.NewInMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	h, err := New(testConfig(), WithStore(st), WithExtension(c), WithExtension(b), WithExtension(a))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Serve(context.Background()); err == nil {
		t.Fatal("Serve with a panicking extension succeeded")
	}
	want := []string{"start a", "start b", "stop b", "shutdown b", "stop a", "shutdown a"}
	if !slices.Equal(log.events, want) {
		t.Fatalf("startup and undo: %v, want %v", log.events, want)
	}
	for _, addr := range []net.Addr{h.PublicAddr(), h.ControlAddr()} {
		ln, err := net.Listen("tcp", addr.String())
		if err != nil {
			t.Fatalf("the failed hub's port %s is still bound: %v", addr, err)
		}
		ln.Close()
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("a hub that failed to start is not Done")
	}
	h2 := startHub(t, testConfig(), WithStore(st))
	register(t, h2, fakePeer(), "", nil)
}

// TestClaimingTheHubsOwnIDIsRefused: a registrant that presents the
// hub's own pinned instance id is refused, and the pinned entry stays.
func TestClaimingTheHubsOwnIDIsRefused(t *testing.T) {
	h := startHub(t, testConfig(), veloTCP(t))
	own := h.Node().PeerInfo()
	before, ok := h.Store().Get(own.InstanceID)
	if !ok || !before.Pinned {
		t.Fatalf("pinned entry: %+v %v", before, ok)
	}
	claim := ext.PeerInfo{InstanceID: own.InstanceID, Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:1")}}
	for _, cred := range []protocol.Credential{"", protocol.NewCredential()} {
		st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, claim, nil), cred)
		wantCode(t, "claim of the hub's own id", st, b, protocol.CodeUnauthorized, 401)
	}
	after, ok := h.Store().Get(own.InstanceID)
	if !ok || !after.Pinned || after.Incarnation != before.Incarnation {
		t.Fatalf("the pinned entry changed: %+v", after)
	}
}

// TestAddressWithNoSharedTransportIsRefusedBeforeTheLock: with velo, a
// registrant whose address names no transport the hub speaks is refused
// with 400 before anything is written (velo could never register it, so
// the registration would fail after its write, on every retry).
func TestAddressWithNoSharedTransportIsRefusedBeforeTheLock(t *testing.T) {
	h := startHub(t, testConfig(), veloTCP(t))
	p := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{"carrier-pigeon": []byte("coop 7")}}
	st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), "")
	wantCode(t, "an address with no shared transport", st, b, protocol.CodeBadRequest, 400)
	if _, ok := h.Store().Get(p.InstanceID); ok {
		t.Fatal("the refused registration was written")
	}
}
