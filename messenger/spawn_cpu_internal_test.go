package messenger

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// BenchmarkSpawnFireCPU is the receiving half of a pipelined
// fire-and-forget stream without the socket: one goroutine hands requests
// to a spawn-mode handler 64 at a time, as a reader does a read of them
// (spawnBatch), and the pool's workers run them. It reports the process's
// CPU per request (cpu-ns/op), dispatch and run together, which on a
// shared machine moves less than the wall time.
func BenchmarkSpawnFireCPU(b *testing.B) {
	m := &Messenger{done: make(chan struct{}), maxRuns: DefaultMaxRunningHandlers}
	b.Cleanup(func() {
		m.stopped.Store(true)
		close(m.done)
	})
	st := ext.NewShutdownState()
	// The handler gives back a credit every 64 requests; the sender holds
	// at most 16 reads' worth unrun, as a socket's window would.
	var ran atomic.Int64
	credits := make(chan struct{}, 1<<20)
	for range 16 {
		credits <- struct{}{}
	}
	r := m.newRegistered(FireHandler("sink", func(*Context) {
		if ran.Add(1)%64 == 0 {
			credits <- struct{}{}
		}
	}), false)
	send := func(n int) {
		n = (n + 63) / 64 * 64 // whole reads: each gives its credit back
		want := ran.Load() + int64(n)
		for n > 0 {
			<-credits
			var sb spawnBatch
			var scratch job
			for k := min(n, 64); k > 0; k-- {
				j := sb.slot(&scratch)
				g, ok := st.TryAcquire()
				if !ok {
					b.Fatal("the shutdown state refused a request")
				}
				*j = job{guard: g, hdr: requestHeader{rtype: FireAndForget}}
				sb.dispatch(r, j)
				n--
			}
			sb.finish(nil)
		}
		for ran.Load() < want {
			runtime.Gosched()
		}
		for len(credits) < 16 {
			runtime.Gosched()
		}
	}
	send(10000)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := rusageCPU(b)
	send(b.N)
	b.ReportMetric(float64(rusageCPU(b)-cpu0)/float64((b.N+63)/64*64), "cpu-ns/op")
}

// rusageCPU is the process's CPU time so far, user and system.
func rusageCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Skip("no rusage:", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
