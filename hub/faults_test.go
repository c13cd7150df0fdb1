package hub

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"

	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/storetest"
)

// TestIndeterminateWriteIsResolved: a store write whose answer is lost
// is settled by its op id: one that applied commits the registration,
// one that did not answers unavailable and leaves the prior registration
// as it was.
func TestIndeterminateWriteIsResolved(t *testing.T) {
	fs, err := storetest.NewFaultStore()
	if err != nil {
		t.Fatal(err)
	}
	h := startHub(t, testConfig(), WithStore(fs))
	p := fakePeer()
	fs.Inject(storetest.OpPut, storetest.Fault{Indeterminate: storetest.AppliedLost, Times: 1})
	r1 := register(t, h, p, "", nil)
	if _, err := h.Authority().Authorize(p.InstanceID, r1.Credential); err != nil {
		t.Fatalf("a write applied with its answer lost did not commit: %v", err)
	}
	fs.Inject(storetest.OpPut, storetest.Fault{Indeterminate: storetest.NotApplied, Times: 1})
	st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), r1.Credential)
	wantCode(t, "a lost write that did not apply", st, b, protocol.CodeUnavailable, 503)
	if _, err := h.Authority().Authorize(p.InstanceID, r1.Credential); err != nil {
		t.Fatalf("the prior registration changed: %v", err)
	}
}

// TestStoreNotLiveRefusesCredentials: while the store is Degraded every
// credential answers 503 and no registration is taken, but peer lookups
// go on from the store's view.
func TestStoreNotLiveRefusesCredentials(t *testing.T) {
	fs, err := storetest.NewFaultStore()
	if err != nil {
		t.Fatal(err)
	}
	h := startHub(t, testConfig(), WithStore(fs))
	p := fakePeer()
	r := register(t, h, p, "", nil)
	fs.SetContinuity(store.Degraded)
	st, b := call(t, "POST", ctl(h)+protocol.HeartbeatPath(p.InstanceID), nil, r.Credential)
	wantCode(t, "heartbeat on a degraded store", st, b, protocol.CodeUnavailable, 503)
	st, b = call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, fakePeer(), nil), "")
	wantCode(t, "register on a degraded store", st, b, protocol.CodeUnavailable, 503)
	if st, b := call(t, "GET", pub(h)+protocol.PeerByInstancePath(p.InstanceID), nil, ""); st != 200 {
		t.Fatalf("lookup on a degraded store: %d %s", st, b)
	}
	fs.SetContinuity(store.Live)
	if st, b := call(t, "POST", ctl(h)+protocol.HeartbeatPath(p.InstanceID), nil, r.Credential); st != 200 {
		t.Fatalf("heartbeat once live again: %d %s", st, b)
	}
}

// staleView is a FaultStore whose Get does not show the instance while
// hide is set, as a remote store's view lags its writes.
type staleView struct {
	*storetest.FaultStore
	hide atomic.Bool
}

func (s *staleView) Get(id ext.InstanceID) (store.Entry, bool) {
	if s.hide.Load() {
		return store.Entry{}, false
	}
	return s.FaultStore.Get(id)
}

func quickSettle() Option {
	tm := defaultTiming()
	tm.settleRetry = 5 * time.Millisecond
	return withTiming(tm)
}

// TestUnknownWriteThatDidNotApplyFailsClosed: when neither a
// re-registration's write nor its read-back answers, the hub does not
// guess from its view: it answers unavailable and keeps the owner busy
// (the prior credential does not authorize) until the lifecycle's retried
// read-back answers; "not applied" then gives back the prior
// registration.
func TestUnknownWriteThatDidNotApplyFailsClosed(t *testing.T) {
	fs, err := storetest.NewFaultStore()
	if err != nil {
		t.Fatal(err)
	}
	h := startHub(t, testConfig(), WithStore(fs), quickSettle())
	p := fakePeer()
	r1 := register(t, h, p, "", nil)
	fs.Inject(storetest.OpPut, storetest.Fault{Indeterminate: storetest.NotApplied, Times: 1})
	fs.Inject(storetest.OpResolve, storetest.Fault{Err: errors.New("no answer")})
	st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), r1.Credential)
	wantCode(t, "write and read-back unanswered", st, b, protocol.CodeUnavailable, 503)
	if _, err := h.Authority().Authorize(p.InstanceID, r1.Credential); !errors.Is(err, protocol.CodeBusy) {
		t.Fatalf("the prior credential while the write is unsettled: %v, want busy", err)
	}
	st, b = call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), r1.Credential)
	if eb := decodeErr(t, b); eb.Code != protocol.CodeBusy {
		t.Fatalf("a registration while unsettled: %d %s, want busy", st, b)
	}
	// The store answers again: the next retried read-back settles it.
	g := storetest.NewGate()
	fs.Inject(storetest.OpResolve, storetest.Fault{Gate: g, Times: 1})
	<-g.Reached()
	g.Open()
	waitUnlocked(h) // the lifecycle settles under the lock
	lease, err := h.Authority().Authorize(p.InstanceID, r1.Credential)
	if err != nil || lease.Epoch != r1.Epoch {
		t.Fatalf("the prior registration after a read-back that found nothing: %+v %v", lease, err)
	}
}

// TestUnknownWriteThatAppliedIsRemoved: the same, but the write applied
// and the hub's view does not show it yet. The owner stays busy (the
// prior credential must not authorize: the store no longer holds that
// registration); once the read-back answers "applied", the entry is
// removed as after any failure after the write, the extensions hear
// on_removed, and the instance registers again without a credential.
func TestUnknownWriteThatAppliedIsRemoved(t *testing.T) {
	fs, err := storetest.NewFaultStore()
	if err != nil {
		t.Fatal(err)
	}
	sv := &staleView{FaultStore: fs}
	rec := newRecorder("rec")
	h := startHub(t, testConfig(), WithStore(sv), WithExtension(rec), quickSettle())
	p := fakePeer()
	r1 := register(t, h, p, "", nil)
	sv.hide.Store(true)
	fs.Inject(storetest.OpPut, storetest.Fault{Indeterminate: storetest.AppliedLost, Times: 1})
	fs.Inject(storetest.OpResolve, storetest.Fault{Err: errors.New("no answer")})
	st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), r1.Credential)
	wantCode(t, "write and read-back unanswered", st, b, protocol.CodeUnavailable, 503)
	if _, err := h.Authority().Authorize(p.InstanceID, r1.Credential); !errors.Is(err, protocol.CodeBusy) {
		t.Fatalf("the prior credential while the write is unsettled: %v, want busy", err)
	}
	sv.hide.Store(false)
	fs.Clear()
	rec.waitRemoved(t, p.InstanceID)
	waitUnlocked(h)
	if _, ok := h.Store().Get(p.InstanceID); ok {
		t.Fatal("the entry the unsettled write made is still stored")
	}
	if _, err := h.Authority().Authorize(p.InstanceID, r1.Credential); !errors.Is(err, protocol.CodeNotFound) {
		t.Fatalf("the prior credential after the settle: %v, want not found", err)
	}
	register(t, h, p, "", nil)
}

func decodeErr(t *testing.T, b []byte) protocol.ErrorBody {
	t.Helper()
	var eb protocol.ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil {
		t.Fatalf("not an ErrorBody: %s", b)
	}
	return eb
}
