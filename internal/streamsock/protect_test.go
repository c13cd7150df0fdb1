package streamsock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// Tests of what a node does to protect itself from its inbound connections:
// announced bytes that never come, too many connections, frames that never
// finish, and a listener that fails to accept.

// connObs counts what a transport reports through ext.ConnectionObservability.
type connObs struct {
	ext.NopObservability
	dropped [ext.NumConnectionDrops]atomic.Int64
	accept  atomic.Int64
}

func (o *connObs) ConnectionDropped(r ext.ConnectionDrop) { o.dropped[r].Add(1) }
func (o *connObs) AcceptError()                           { o.accept.Add(1) }

func heapAfterGC() (inuse, alloc uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.HeapAlloc
}

// dialRaw opens a plain socket to n's listener.
func dialRaw(tb testing.TB, n *testNode) net.Conn {
	tb.Helper()
	c, err := net.DialTimeout("tcp", n.t.ln.Addr().String(), failAfter)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// expectClosed fails the test unless the other end closes c: a read ends
// with EOF or a reset, not with data or a timeout.
func expectClosed(tb testing.TB, c net.Conn, what string) {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(failAfter))
	n, err := c.Read(make([]byte, 64))
	switch {
	case n > 0:
		tb.Fatalf("%s: the node wrote %d bytes instead of closing", what, n)
	case errors.Is(err, os.ErrDeadlineExceeded):
		tb.Fatalf("%s: the node kept the connection open", what)
	case !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET):
		tb.Fatalf("%s: read ended with %v, want EOF or a reset", what, err)
	}
}

// Input that has not arrived costs nothing. 32 connections that each send
// the 11-byte preamble of a 16 MiB frame, and then nothing, raise the heap
// by at most 1 MiB each, and the node goes on serving. The reader used to
// make room for the whole announced frame at once, rounded up to a 32 MiB
// chunk: these connections held 1 GiB between them.
func TestAnnouncedBytesThatNeverArriveCostNothing(t *testing.T) {
	const conns = 32
	var read atomic.Int64
	rx := newNodeWith(t, tcpNet{}, Config{}, func(tr *Transport) {
		tr.testReadHook = func(n int) { read.Add(int64(n)) }
	})
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	tx := newNode(t, Config{})
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	// One frame end to end first, so one-time costs stay out of the figure.
	if _, err := tx.t.Send(rx.id, seqMsg(0, []byte("before"))); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &got, 1)

	inuse0, alloc0 := heapAfterGC()
	base := read.Load()
	preamble := make([]byte, frame.PreambleLen)
	frame.PutPreamble(preamble, ext.Message, 0, frame.DefaultMaxFrame)
	for range conns {
		if _, err := dialRaw(t, rx).Write(preamble); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the node to read every preamble", func() bool { return read.Load()-base >= conns*frame.PreambleLen })
	inuse1, alloc1 := heapAfterGC()
	perConn := max(int64(inuse1)-int64(inuse0), int64(alloc1)-int64(alloc0)) / conns
	t.Logf("heap growth per connection: %d bytes (HeapInuse %+d, HeapAlloc %+d over %d connections)",
		perConn, int64(inuse1)-int64(inuse0), int64(alloc1)-int64(alloc0), conns)
	if perConn > 1<<20 {
		t.Fatalf("each connection that sent only a preamble grew the heap by %d bytes, want at most 1 MiB", perConn)
	}

	if _, err := tx.t.Send(rx.id, seqMsg(1, []byte("after"))); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &got, 2)
	if n := rx.t.inbound.Load(); n != conns+1 {
		t.Fatalf("%d inbound connections open, want the %d that sent a preamble and the sender's", n, conns)
	}
}

// A connection over MaxConnections is closed as soon as it is accepted and
// counted; one that closes frees its place.
func TestConnectionsOverTheLimitAreClosedAtOnce(t *testing.T) {
	obs := &connObs{}
	rx := newNode(t, Config{MaxConnections: 2})
	rx.t.SetObservability(obs)
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	msg := frame.Append(nil, seqMsg(0, []byte("hello")))

	c1, c2 := dialRaw(t, rx), dialRaw(t, rx)
	for _, c := range []net.Conn{c1, c2} {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	waitCount(t, &got, 2) // both were accepted and are served

	expectClosed(t, dialRaw(t, rx), "a third connection")
	if s := rx.t.Stats(); s.RefusedConnections != 1 {
		t.Fatalf("RefusedConnections = %d, want 1", s.RefusedConnections)
	}
	if n := obs.dropped[ext.DropOverLimit].Load(); n != 1 {
		t.Fatalf("over_limit drops observed: %d, want 1", n)
	}

	c1.Close()
	eventually(t, "the closed connection to leave", func() bool { return rx.t.inbound.Load() == 1 })
	c4 := dialRaw(t, rx)
	if _, err := c4.Write(msg); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &got, 3)
	if s := rx.t.Stats(); s.RefusedConnections != 1 {
		t.Fatalf("RefusedConnections = %d after a place freed, want still 1", s.RefusedConnections)
	}
}

// A frame that stays half-received for FrameTimeout closes its connection,
// counted, within one and a half timeouts; a connection that waits between
// frames is never cut, even after a frame of it arrived in two parts (which
// armed the deadline).
func TestAFrameHalfReceivedPastTheTimeoutClosesItsConnection(t *testing.T) {
	const timeout = 150 * time.Millisecond
	var read atomic.Int64
	obs := &connObs{}
	rx := newNodeWith(t, tcpNet{}, Config{FrameTimeout: timeout}, func(tr *Transport) {
		tr.testReadHook = func(n int) { read.Add(int64(n)) }
	})
	rx.t.SetObservability(obs)
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	msg := frame.Append(nil, seqMsg(0, make([]byte, 100)))

	// The idle connection: one frame in two parts, then nothing.
	idle := dialRaw(t, rx)
	if _, err := idle.Write(msg[:20]); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first part to be read", func() bool { return read.Load() >= 20 })
	if _, err := idle.Write(msg[20:]); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &got, 1)

	// Two stalled frames, one after the other: when the second is cut, the
	// idle connection has waited longer than its deadline could reach.
	for i := range 2 {
		stalled := dialRaw(t, rx)
		start := time.Now()
		if _, err := stalled.Write(msg[:frame.PreambleLen+3]); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, stalled, "a connection with a frame stalled")
		elapsed := time.Since(start)
		if elapsed < timeout {
			t.Fatalf("stalled connection %d closed after %v, before the timeout of %v", i, elapsed, timeout)
		}
		if limit := timeout*3/2 + 500*time.Millisecond; elapsed > limit {
			t.Fatalf("stalled connection %d closed after %v, want at most 1.5 timeouts (%v with slack)", i, elapsed, limit)
		}
	}
	if s := rx.t.Stats(); s.StalledConnections != 2 {
		t.Fatalf("StalledConnections = %d, want 2", s.StalledConnections)
	}
	if n := obs.dropped[ext.DropStalledFrame].Load(); n != 2 {
		t.Fatalf("stalled_frame drops observed: %d, want 2", n)
	}
	if _, err := idle.Write(msg); err != nil {
		t.Fatalf("the idle connection was closed: %v", err)
	}
	waitCount(t, &got, 2)
}

// flakyListener fails its first accepts with the given errors, then
// accepts for real, and records when each Accept was called.
type flakyListener struct {
	net.Listener
	mu    sync.Mutex
	errs  []error
	calls []time.Time
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls = append(l.calls, time.Now())
	var err error
	if len(l.errs) > 0 {
		err, l.errs = l.errs[0], l.errs[1:]
	}
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return l.Listener.Accept()
}

func (l *flakyListener) callTimes() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.calls...)
}

// flakyNet listens through a flakyListener.
type flakyNet struct {
	tcpNet
	ln *flakyListener
}

func (n *flakyNet) Listen(ctx context.Context) (net.Listener, []byte, error) {
	ln, ep, err := n.tcpNet.Listen(ctx)
	if err != nil {
		return nil, nil, err
	}
	n.ln.Listener = ln
	return n.ln, ep, nil
}

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// logRecorder is a slog handler that keeps the messages it is given.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func (h *logRecorder) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// The accept loop survives running out of file descriptors: it backs off
// 5 ms, 10 ms, 20 ms (doubling, as net/http does), logs and counts each
// failure, and then serves connections again. It used to return on the
// first such error, silently, and the node never accepted again.
func TestTheAcceptLoopBacksOffFromEMFILE(t *testing.T) {
	fl := &flakyListener{errs: []error{acceptErr(syscall.EMFILE), acceptErr(syscall.ENFILE), acceptErr(syscall.EMFILE)}}
	logs := &logRecorder{}
	obs := &connObs{}
	rx := newNodeWith(t, &flakyNet{ln: fl}, Config{Logger: slog.New(logs)}, func(tr *Transport) { tr.SetObservability(obs) })
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	tx := newNode(t, Config{})
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.t.Send(rx.id, seqMsg(0, []byte("through"))); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &got, 1)

	calls := fl.callTimes()
	if len(calls) < 4 {
		t.Fatalf("%d accepts, want the 3 failures and one that served", len(calls))
	}
	for i, want := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
		if gap := calls[i+1].Sub(calls[i]); gap < want {
			t.Errorf("accept %d came %v after failure %d, want a backoff of at least %v", i+2, gap, i+1, want)
		}
	}
	if s := rx.t.Stats(); s.AcceptErrors != 3 {
		t.Errorf("AcceptErrors = %d, want 3", s.AcceptErrors)
	}
	if n := obs.accept.Load(); n != 3 {
		t.Errorf("accept errors observed: %d, want 3", n)
	}
	if n := logs.count("WARN accept failed; retrying"); n != 3 {
		t.Errorf("%d warnings logged, want 3 (log: %q)", n, logs.msgs)
	}
}

// Shutdown ends the accept loop's backoff at once; Closed does not wait it out.
func TestShutdownDoesNotWaitOutTheAcceptBackoff(t *testing.T) {
	var errs []error
	for range 20 {
		errs = append(errs, acceptErr(syscall.EMFILE))
	}
	fl := &flakyListener{errs: errs}
	tx := newNodeWith(t, &flakyNet{ln: fl}, Config{Logger: slog.New(&logRecorder{})}, nil)
	// After its 8th failure the loop pauses 640 ms.
	eventually(t, "the 8th failed accept", func() bool { return len(fl.callTimes()) >= 8 })
	tx.t.Shutdown()
	select {
	case <-tx.t.Closed():
	case <-time.After(failAfter):
		t.Fatal("Closed never closed")
	}
	closed := time.Now()
	calls := fl.callTimes()
	if len(calls) != 8 {
		t.Fatalf("%d accepts, want 8: the loop went on after Shutdown", len(calls))
	}
	// Closed waits for the accept loop; without the stop it would sleep
	// out its pause first.
	if pauseEnd := calls[7].Add(640 * time.Millisecond); !closed.Before(pauseEnd) {
		t.Fatalf("Closed %v after the 8th failed accept: the accept loop slept out its backoff", closed.Sub(calls[7]))
	}
}

// An accept error that will not pass ends the accept loop with an error in
// the log, and closes the listener so peers are refused rather than left
// in a backlog nobody reads.
func TestAPermanentAcceptErrorClosesTheListener(t *testing.T) {
	fl := &flakyListener{errs: []error{errors.New("accept: the listener broke")}}
	logs := &logRecorder{}
	rx := newNodeWith(t, &flakyNet{ln: fl}, Config{Logger: slog.New(logs)}, nil)
	addr := rx.t.ln.Addr().String()
	eventually(t, "the error to be logged", func() bool { return logs.count("ERROR accept failed") == 1 })
	eventually(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	if s := rx.t.Stats(); s.AcceptErrors != 1 {
		t.Fatalf("AcceptErrors = %d, want 1", s.AcceptErrors)
	}
}
