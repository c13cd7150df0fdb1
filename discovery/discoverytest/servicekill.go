package discoverytest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// Bounds of RunServiceKill.
const (
	killCallers   = 4                      // goroutines calling at once
	killAfter     = 200                    // calls that finish after the kill
	deadWaitLimit = 100 * time.Millisecond // how long a call may wait on the dead worker
)

// callRecord is one call of the load.
type callRecord struct {
	start, end time.Time
	answer     string
	err        error
}

// RunServiceKill starts three worker processes that register in a service
// of a fresh name on the backend at addr (the test binary's TestMain must
// call ServeWorkerIfChild), and has a node call that service from
// several goroutines. Mid-load one worker is SIGKILLed. Every call that
// starts after the first failed call returned must land on a live worker,
// and no call may wait more than 100 ms on the dead one (counted from
// when its process was reaped, before which no peer can notice).
func RunServiceKill(t *testing.T, addr string, open Backends) {
	var ids []ext.InstanceID
	var kills []func()
	service := serviceName()
	for range 3 {
		id, kill := StartWorker(t, addr, service)
		ids, kills = append(ids, id), append(kills, kill)
	}
	caller := serviceCaller(t, addr, open)
	rec := &recorder{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range killCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec.load(caller, service, stop)
		}()
	}
	rec.waitFor(t, func(r []callRecord) bool { return everyAnswered(r, ids) })
	killed := time.Now()
	kills[1]()
	reaped := time.Now()
	rec.waitFor(t, func(r []callRecord) bool { return countEndedAfter(r, reaped) >= killAfter })
	close(stop)
	wg.Wait()
	checkKill(t, rec.all(), ids[1], killed, reaped)
}

// serviceCaller is a node on the backend with no service of its own.
func serviceCaller(t *testing.T, addr string, open Backends) *velo.Node {
	t.Helper()
	peers, svcs, err := open(addr)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(ctxT(t), velo.WithTransport(tr), velo.WithDiscovery(peers), velo.WithServiceDiscovery(svcs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n
}

// recorder keeps every call of the load and wakes waiters on each.
type recorder struct {
	mu    sync.Mutex
	calls []callRecord
	added chan struct{} // closed and replaced on each record
}

func (r *recorder) load(n *velo.Node, service string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c := callRecord{start: time.Now()}
		resp, err := n.Unary(ctx, velo.Service(service), "who", nil)
		cancel()
		c.end, c.answer, c.err = time.Now(), string(resp), err
		r.add(c)
	}
}

func (r *recorder) add(c callRecord) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	if r.added != nil {
		close(r.added)
		r.added = nil
	}
	r.mu.Unlock()
}

func (r *recorder) all() []callRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// waitFor returns once cond holds for the calls so far; it fails after Wait.
func (r *recorder) waitFor(t *testing.T, cond func([]callRecord) bool) {
	t.Helper()
	deadline := time.After(Wait)
	for {
		r.mu.Lock()
		if cond(r.calls) {
			r.mu.Unlock()
			return
		}
		if r.added == nil {
			r.added = make(chan struct{})
		}
		ch := r.added
		r.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("load: condition not met after %v (%d calls, last error %v)", Wait, len(r.all()), lastErr(r.all()))
		}
	}
}

func lastErr(calls []callRecord) error {
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].err != nil {
			return calls[i].err
		}
	}
	return nil
}

func everyAnswered(calls []callRecord, ids []ext.InstanceID) bool {
	for _, id := range ids {
		if !slices.ContainsFunc(calls, func(c callRecord) bool { return c.answer == id.String() }) {
			return false
		}
	}
	return true
}

func countEndedAfter(calls []callRecord, at time.Time) int {
	n := 0
	for _, c := range calls {
		if c.end.After(at) {
			n++
		}
	}
	return n
}

// checkKill holds the load to the suite's promises.
func checkKill(t *testing.T, calls []callRecord, dead ext.InstanceID, killed, reaped time.Time) {
	t.Helper()
	var firstFail time.Time
	failed, worst := 0, time.Duration(0)
	for _, c := range calls {
		if c.err == nil {
			continue
		}
		failed++
		if firstFail.IsZero() || c.end.Before(firstFail) {
			firstFail = c.end
		}
		from := c.start
		if from.Before(reaped) {
			from = reaped
		}
		if w := c.end.Sub(from); w > worst {
			worst = w
		}
		if c.end.Before(killed) {
			t.Errorf("a call failed before the kill: %v", c.err)
		}
	}
	for _, c := range calls {
		if c.err != nil && c.start.After(firstFail) {
			t.Errorf("a call started %v after the first failure still failed: %v", c.start.Sub(firstFail), c.err)
		}
		if c.err == nil && c.start.After(reaped) && c.answer == dead.String() {
			t.Errorf("a call started after the kill was answered by the dead worker")
		}
	}
	if worst > deadWaitLimit {
		t.Errorf("a call waited %v on the dead worker after it was reaped, want at most %v", worst, deadWaitLimit)
	}
	t.Logf("%d calls, %d after the kill; %d failed (on the dead worker), longest wait on it %v", len(calls), countEndedAfter(calls, reaped), failed, worst)
}
