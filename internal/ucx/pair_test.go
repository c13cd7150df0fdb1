//go:build ucx

package ucx

import (
	"runtime"
	"testing"
	"time"
)

// newWorker starts a worker over tcp unless the environment names the
// transports, and closes it when the test ends.
func newWorker(t testing.TB) *Worker {
	t.Helper()
	w, err := NewWorker(Config{TLS: "tcp", NoPeerErrors: shmOnly()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// shmOnly reports whether UCX_TLS names only shared-memory transports,
// which cannot detect a lost peer: the workers of the tests then run
// without peer error handling, and the tests of a lost peer skip.
func shmOnly() bool { return EnvSharedMemoryOnly() }

// needPeerErrors skips a test of a lost peer over shared memory.
func needPeerErrors(t testing.TB) {
	if shmOnly() {
		t.Skip("UCX_TLS names only shared-memory transports, which have no peer failure handler in UCX 1.13")
	}
}

// pair is two workers in this process, connected both ways.
type pair struct {
	a, b   *Worker
	ab, ba EndpointID // a's endpoint to b, b's to a
}

func newPair(t testing.TB) *pair {
	t.Helper()
	p := &pair{a: newWorker(t), b: newWorker(t)}
	var err error
	if p.ab, err = p.a.Connect(p.b.Address()); err != nil {
		t.Fatal(err)
	}
	if p.ba, err = p.b.Connect(p.a.Address()); err != nil {
		t.Fatal(err)
	}
	return p
}

// wait receives from ch, failing the test after bound.
func wait[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitBound):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitBound is far above any wait a passing test makes on a loaded
// 2-core machine under -race.
const waitBound = 20 * time.Second

// waitUntil yields until cond holds, failing the test after waitBound.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}
