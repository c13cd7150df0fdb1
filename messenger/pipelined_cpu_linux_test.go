package messenger_test

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkFireSendCPU is BenchmarkFirePipelined that also reports the
// sending goroutine's own CPU per message (send-cpu-ns/op), read from its
// OS thread's clock: on a shared machine that moves far less than the
// wall time, and it is the part of a message's cost that one sender
// cannot spread over other cores.
func BenchmarkFireSendCPU(b *testing.B) {
	p := newFirePipe(b)
	p.send(b, 10000)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	before := threadCPU(b)
	target := p.b.InstanceID()
	want := p.seen.Load() + int64(b.N)
	for range b.N {
		if err := p.a.Send(p.ctx, target, "sink", p.payload); err != nil {
			b.Fatal(err)
		}
	}
	cpu := threadCPU(b) - before
	for p.seen.Load() < want {
		time.Sleep(100 * time.Microsecond)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "send-cpu-ns/op")
}

// threadCPU is the CPU time of the calling goroutine's OS thread (the
// goroutine must be locked to it).
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Skip("no thread CPU clock:", err)
	}
	return time.Duration(ts.Nano())
}
