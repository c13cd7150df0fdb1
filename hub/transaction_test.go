package hub

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// TestClientDisconnectStillRegisters: the transaction is a task of the
// hub, so a client that closes its connection while an extension's
// Prepare waits does not leave the owner busy; the registration commits.
func TestClientDisconnectStillRegisters(t *testing.T) {
	rec := newRecorder("rec")
	gate := make(chan struct{})
	rec.prepareGate = gate
	h := startHub(t, testConfig(), WithExtension(rec))
	p := fakePeer()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ctl(h)+protocol.PathInstances, bytes.NewReader(regBody(t, p, nil)))
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-rec.entered // the transaction holds the owner and waits in Prepare
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	rec.mu.Lock()
	rec.prepareGate = nil
	rec.mu.Unlock()
	close(gate)
	// The task commits: the owner is live, not busy. The task holds the
	// lock until it is done, so taking the lock waits for it.
	waitUnlocked(h)
	if g := h.auth.get(p.InstanceID); g == nil || g.kind != grantLive {
		t.Fatalf("the registration did not commit after its client left: %+v", g)
	}
	if _, ok := rec.epochOf(p.InstanceID); !ok {
		t.Fatal("the extension did not commit")
	}
	// The registration holds; a claim without its credential is refused
	// with unauthorized, not busy.
	st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), "")
	wantCode(t, "claim after the lost answer", st, b, protocol.CodeUnauthorized, 401)
}

// TestPrepareFailureKeepsPrior: a re-registration whose extension fails
// in Prepare leaves the prior registration exactly as it was: its
// credential works, its epoch stays committed, the staged values were
// aborted.
func TestPrepareFailureKeepsPrior(t *testing.T) {
	first, second := newRecorder("first"), newRecorder("second")
	h := startHub(t, testConfig(), WithExtension(first), WithExtension(second))
	p := fakePeer()
	r1 := register(t, h, p, "", nil)
	second.mu.Lock()
	second.prepareErr = protocol.Errorf(protocol.CodeBadRequest, "second refuses")
	second.mu.Unlock()
	st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), r1.Credential)
	wantCode(t, "refused re-registration", st, b, protocol.CodeBadRequest, 400)
	if first.aborted.Load() != 1 {
		t.Fatalf("first's staged value was aborted %d times, want 1", first.aborted.Load())
	}
	if st, b := call(t, "POST", ctl(h)+protocol.HeartbeatPath(p.InstanceID), nil, r1.Credential); st != 200 {
		t.Fatalf("prior credential after a failed prepare: %d %s", st, b)
	}
	if e, _ := first.epochOf(p.InstanceID); e != r1.Epoch {
		t.Fatalf("first's committed epoch %d, want %d", e, r1.Epoch)
	}
	lease, err := h.Authority().Authorize(p.InstanceID, r1.Credential)
	if err != nil || lease.Epoch != r1.Epoch {
		t.Fatalf("authorize: %+v %v", lease, err)
	}
	// A plain error is internal, a timeout unavailable; neither changes
	// the prior registration.
	second.mu.Lock()
	second.prepareErr = errRefused
	second.mu.Unlock()
	st, b = call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), r1.Credential)
	wantCode(t, "plain prepare error", st, b, protocol.CodeInternal, 500)
	if _, err := h.Authority().Authorize(p.InstanceID, r1.Credential); err != nil {
		t.Fatalf("authorize after a second failure: %v", err)
	}
}

// TestFailureAfterWriteRegistersAgain: an extension that panics in
// Commit fails the registration after its store write: the answer is
// register_again, the new entry (and the prior one) is gone, every
// extension heard on_removed, and the instance can register fresh.
func TestFailureAfterWriteRegistersAgain(t *testing.T) {
	rec := newRecorder("rec")
	h := startHub(t, testConfig(), WithExtension(rec))
	p := fakePeer()
	r1 := register(t, h, p, "", nil)
	rec.mu.Lock()
	rec.commitPanic = true
	rec.mu.Unlock()
	st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), r1.Credential)
	wantCode(t, "failure after the write", st, b, protocol.CodeRegisterAgain, 409)
	rec.waitRemoved(t, p.InstanceID)
	if _, ok := h.Store().Get(p.InstanceID); ok {
		t.Fatal("the entry is still in the store")
	}
	st, b = call(t, "GET", pub(h)+protocol.PeerByInstancePath(p.InstanceID), nil, "")
	wantCode(t, "lookup after register_again", st, b, protocol.CodeNotFound, 404)
	st, b = call(t, "POST", ctl(h)+protocol.HeartbeatPath(p.InstanceID), nil, r1.Credential)
	if st != 404 && st != 409 {
		t.Fatalf("old credential after register_again: %d %s", st, b)
	}
	rec.mu.Lock()
	rec.commitPanic = false
	rec.mu.Unlock()
	// The transaction delivered the removal itself before it answered.
	if g := h.auth.get(p.InstanceID); g != nil {
		t.Fatalf("the owner is not free after register_again: %+v", g)
	}
	register(t, h, p, "", nil)
}

// TestLockTimeoutAnswersBusy: a registration that waits longer than
// lock_timeout_ms for the lock answers 503 with code busy.
func TestLockTimeoutAnswersBusy(t *testing.T) {
	cfg := testConfig()
	cfg.LockTimeoutMS = 50
	h := startHub(t, cfg)
	h.lock <- struct{}{} // hold the lock as a long registration would
	st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, fakePeer(), nil), "")
	<-h.lock
	wantCode(t, "lock timeout", st, b, protocol.CodeBusy, 503)
}

// waitUnlocked takes the registration lock and gives it back: whatever
// held it (a transaction, a removal delivery) has finished.
func waitUnlocked(h *Hub) {
	h.lock <- struct{}{}
	<-h.lock
}

var _ = ext.InstanceID{}

// TestLockWaiterAnswersUnavailableAtShutdown: a registration waiting for
// the lock when Shutdown begins answers 503 unavailable while the
// registration holding the lock still runs, and runs no step of its own
// (its Prepare never begins); the one holding the lock finishes and
// answers 200 before the hub stops.
func TestLockWaiterAnswersUnavailableAtShutdown(t *testing.T) {
	rec := newRecorder("rec")
	gate := make(chan struct{})
	rec.prepareGate = gate
	h, err := New(testConfig(), WithExtension(rec))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		st int
		b  []byte
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, fakePeer(), nil), "")
		first <- answer{st, b}
	}()
	<-rec.entered // the first holds the lock, in Prepare
	go func() {
		st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, fakePeer(), nil), "")
		second <- answer{st, b}
	}()
	stopped := make(chan error, 1)
	go func() { stopped <- h.Shutdown(context.Background()) }()
	a := <-second // arrives while the first is still held at the gate
	wantCode(t, "a lock waiter at shutdown", a.st, a.b, protocol.CodeUnavailable, 503)
	close(gate)
	if a := <-first; a.st != 200 {
		t.Fatalf("the registration holding the lock: %d %s", a.st, a.b)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := len(rec.entered); n != 0 {
		t.Fatalf("%d more Prepare calls began after the stop began", n)
	}
}
