package hub

import (
	"testing"

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
