package streaming

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A consumer parked in NextBytes waits in the library's own frame: the
// library puts one frame on its stack (nextBytes: NextBytes is inlined
// into its caller) when it waits on its channel alone, and two when the
// wait selects on the context too (SelectWait). It used to put three
// (NextBytes, Await, waitLocked) and five before that (PopBytes, the pop
// loop and its take). An anchor host keeps a goroutine per request parked
// there, and every GC cycle unwinds and scans each of those stacks. Both
// kinds of wait are counted: the first ones select on the context, later
// ones receive alone.
func TestParkedConsumerFrames(t *testing.T) {
	m := newTestManager(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s, err := AttachAnchor[[]byte](ctx, m, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	got := make(chan error, 1)
	go func() {
		for {
			if _, err := a.NextBytes(ctx); err != nil {
				got <- err
				return
			}
			got <- nil
		}
	}()
	for i := range 4 { // waits 1 and 2 select, 3 and 4 receive
		want := 1
		if i < 2 { // inlet.watchAfterSelects
			want = 2
		}
		if n := parkedLibraryFrames(t); n != want {
			t.Fatalf("wait %d: the parked consumer has %d library frames on its stack, want %d:\n%s", i+1, n, want, parkedStack(t))
		}
		if err := s.SendBytes(ctx, []byte("tok")); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
}

// parkedStack waits for the goroutine blocked in NextBytes to park and
// returns its stack trace.
func parkedStack(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for _, g := range bytes.Split(buf[:n], []byte("\n\n")) {
			head, _, _ := strings.Cut(string(g), "\n")
			parked := strings.Contains(head, "[select") || strings.Contains(head, "[chan receive")
			if parked && bytes.Contains(g, []byte(").NextBytes(")) {
				return string(g)
			}
		}
		runtime.Gosched()
	}
	t.Fatal("no consumer parked in NextBytes within 10 s")
	return ""
}

// parkedLibraryFrames counts the frames of package streaming and its
// internal packages on the parked consumer's stack.
func parkedLibraryFrames(t *testing.T) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(parkedStack(t), "\n") {
		lib := strings.HasPrefix(line, "github.com/velo-go/velo/streaming.") ||
			strings.HasPrefix(line, "github.com/velo-go/velo/streaming/internal/")
		// Not this test's function; and an inlined call, printed with
		// "(...)", takes no frame of its own.
		if lib && !strings.Contains(line, ".Test") && !strings.HasSuffix(line, "(...)") {
			n++
		}
	}
	return n
}
