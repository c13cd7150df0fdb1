package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

const waitLimit = 20 * time.Second

// closeLimit bounds the wait for a receiver to close a connection it must
// close at once.
const closeLimit = 5 * time.Second

// isTimeout reports whether err is a deadline or timeout error.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// seqFrame builds a message whose header says (lane, seq).
func seqFrame(lane, seq int, payload []byte) ext.Frame {
	h := make([]byte, 16)
	binary.BigEndian.PutUint64(h, uint64(lane))
	binary.BigEndian.PutUint64(h[8:], uint64(seq))
	return ext.Frame{Type: ext.Message, Header: h, Payload: payload}
}

func parseSeq(f ext.Frame) (lane, seq int) {
	return int(binary.BigEndian.Uint64(f.Header)), int(binary.BigEndian.Uint64(f.Header[8:]))
}

// collect pops n messages from the receiver, copying them and releasing
// their guards and buffers.
func collect(t testing.TB, n *node, count int) []ext.Frame {
	t.Helper()
	ctx := ctxT(t)
	var out []ext.Frame
	var batch []ext.InboundMessage
	for len(out) < count {
		var err error
		batch, err = n.adapter.Messages().PopAll(ctx, batch[:0])
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(out), count, err)
		}
		for _, m := range batch {
			// Done gives the read buffer back, so keep copies.
			out = append(out, ext.Frame{
				Type:    m.Type,
				Header:  bytes.Clone(m.Header),
				Payload: bytes.Clone(m.Payload),
			})
			m.Done()
		}
	}
	return out
}

func mustSend(t testing.TB, tr ext.Transport, to ext.InstanceID, lane int, f ext.Frame) ext.SendOutcome {
	t.Helper()
	out, err := tr.SendOnLane(to, lane, f)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return out
}

func testOrderPerLane(t *testing.T, f Factory) {
	const lanes, per = 4, 5000
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{Lanes: lanes}, 0)
	tx.register(t, rx)
	if got := tx.tr.Lanes(rx.id); got != lanes {
		t.Fatalf("Lanes = %d, want %d", got, lanes)
	}
	var wg sync.WaitGroup
	for l := 0; l < lanes; l++ {
		wg.Add(1)
		go func(l int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				out := mustSend(t, tx.tr, rx.id, l, seqFrame(l, i, []byte("x")))
				if err := out.Wait(ctxT(t)); err != nil {
					t.Errorf("admission: %v", err)
					return
				}
			}
		}(l)
	}
	next := make([]int, lanes)
	for _, fr := range collect(t, rx, lanes*per) {
		l, s := parseSeq(fr)
		if s != next[l] {
			t.Fatalf("lane %d: got seq %d, want %d", l, s, next[l])
		}
		next[l]++
	}
	wg.Wait()
}

func testLargeFrames(t *testing.T, f Factory) {
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{}, 0)
	tx.register(t, rx)
	const size = 8 << 20
	var want [][]byte
	for i := 0; i < 3; i++ {
		p := bytes.Repeat([]byte{byte(i + 1), 0xAB, byte(i * 7)}, size/3+1)[:size]
		want = append(want, p)
		mustSend(t, tx.tr, rx.id, 0, seqFrame(0, i, p)).Wait(ctxT(t))
		// A small frame between the large ones checks ordering across paths.
		mustSend(t, tx.tr, rx.id, 0, seqFrame(0, 100+i, []byte("small")))
	}
	got := collect(t, rx, 6)
	for i := 0; i < 3; i++ {
		if _, s := parseSeq(got[2*i]); s != i || !bytes.Equal(got[2*i].Payload, want[i]) {
			t.Fatalf("large frame %d corrupted or out of order (seq %d, len %d)", i, s, len(got[2*i].Payload))
		}
		if _, s := parseSeq(got[2*i+1]); s != 100+i {
			t.Fatalf("small frame after large frame %d has seq %d", i, s)
		}
	}
}

func testManyPeers(t *testing.T, f Factory) {
	const peers, per = 16, 200
	rx := start(t, f, Options{}, 0)
	var wg sync.WaitGroup
	for p := 0; p < peers; p++ {
		tx := start(t, f, Options{}, 0)
		tx.register(t, rx)
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				mustSend(t, tx.tr, rx.id, 0, seqFrame(p, i, nil))
			}
		}(p)
	}
	next := make([]int, peers)
	for _, fr := range collect(t, rx, peers*per) {
		p, s := parseSeq(fr)
		if s != next[p] {
			t.Fatalf("peer %d: seq %d, want %d", p, s, next[p])
		}
		next[p]++
	}
	wg.Wait()
}

// testAdmission stalls the receiver so the sender's channel fills, then
// checks that pending sends resolve in order once the receiver reads again.
func testAdmission(t *testing.T, f Factory) {
	if f.Brokered {
		t.Skip("a broker buffers for a stalled receiver: the sender's channel does not fill")
	}
	rx := start(t, f, Options{}, 1)
	tx := start(t, f, Options{ChannelBytes: 256 << 10}, 0)
	tx.register(t, rx)
	payload := make([]byte, 32<<10)
	var pending []*ext.Admission
	sent := 0
	// Keep sending until well after the first pending send: the socket
	// buffers fill first, then the channel.
	for len(pending) < 64 {
		out := mustSend(t, tx.tr, rx.id, 0, seqFrame(0, sent, payload))
		if a := out.Admission(); a != nil {
			pending = append(pending, a)
		} else if len(pending) > 0 {
			select {
			case <-pending[len(pending)-1].Done():
			default:
				t.Fatalf("send %d admitted while earlier sends wait in the gate", sent)
			}
		}
		sent++
		if sent > 100000 {
			t.Fatal("the channel never filled")
		}
	}
	// Admissions resolve in order: when one is seen resolved, every
	// earlier one must already be resolved.
	var wg sync.WaitGroup
	for i, a := range pending {
		wg.Add(1)
		go func(i int, a *ext.Admission) {
			defer wg.Done()
			<-a.Done()
			for j := 0; j < i; j++ {
				select {
				case <-pending[j].Done():
				default:
					t.Errorf("admission %d resolved before admission %d", i, j)
				}
			}
		}(i, a)
	}
	got := collect(t, rx, sent)
	for i, fr := range got {
		if _, s := parseSeq(fr); s != i {
			t.Fatalf("frame %d has seq %d", i, s)
		}
	}
	wg.Wait()
	for i, a := range pending {
		if err := a.Err(); err != nil {
			t.Fatalf("pending send %d failed: %v", i, err)
		}
	}
}

func testDrainEcho(t *testing.T, f Factory) {
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{}, 0)
	tx.register(t, rx)
	rx.state.BeginDrain()
	req := seqFrame(0, 42, []byte("refused"))
	mustSend(t, tx.tr, rx.id, 0, req)
	echo, err := tx.adapter.Shutdowns().Pop(ctxT(t))
	if err != nil {
		t.Fatalf("no ShuttingDown echo: %v", err)
	}
	if echo.Type != ext.ShuttingDown || !bytes.Equal(echo.Header, req.Header) {
		t.Fatalf("echo = type %v header %x, want the request header", echo.Type, echo.Header)
	}
	if n := rx.state.InFlight(); n != 0 {
		t.Fatalf("refused request left in-flight at %d", n)
	}
	if rx.adapter.Messages().Len() != 0 {
		t.Fatal("refused request reached the message queue")
	}
}

func testTeardownWrites(t *testing.T, f Factory) {
	const n = 2000
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{TeardownGrace: 5 * time.Second}, 0)
	tx.register(t, rx)
	for i := 0; i < n; i++ {
		mustSend(t, tx.tr, rx.id, 0, seqFrame(0, i, make([]byte, 512)))
	}
	tx.tr.Shutdown()
	if _, err := tx.tr.Send(rx.id, seqFrame(0, n, nil)); !errors.Is(err, ext.ErrTransportClosed) {
		t.Fatalf("send after shutdown: %v, want ErrTransportClosed", err)
	}
	got := collect(t, rx, n)
	for i, fr := range got {
		if _, s := parseSeq(fr); s != i {
			t.Fatalf("frame %d has seq %d", i, s)
		}
	}
	select {
	case <-tx.tr.Closed():
	case <-time.After(waitLimit):
		t.Fatal("Closed never closed")
	}
}

func testUnregister(t *testing.T, f Factory) {
	if f.Brokered {
		t.Skip("a broker buffers for a stalled receiver: nothing is left queued to fail")
	}
	rx := start(t, f, Options{}, 1)
	tx := start(t, f, Options{ChannelBytes: 64 << 20}, 0)
	var failed atomic.Int64
	firstFailure := make(chan struct{})
	tx.adapter.SetSendErrorHandler(func(to ext.InstanceID, fr ext.Frame, err error) {
		if to != rx.id || err == nil {
			t.Errorf("failure report for %v: %v", to, err)
		}
		if failed.Add(1) == 1 {
			close(firstFailure)
		}
	})
	tx.register(t, rx)
	// The receiver takes one message and then stalls, so frames pile up
	// in the sender's channel behind full socket buffers.
	payload := make([]byte, 64<<10)
	const n = 400 // 25 MiB: more than both socket buffers hold
	for i := 0; i < n; i++ {
		mustSend(t, tx.tr, rx.id, 0, seqFrame(0, i, payload))
	}
	tx.tr.Unregister(rx.id)
	tx.tr.Unregister(rx.id) // idempotent
	select {
	case <-firstFailure:
	case <-time.After(waitLimit):
		t.Fatal("unregister failed no queued frame")
	}
	if _, err := tx.tr.Send(rx.id, seqFrame(0, 0, nil)); !errors.Is(err, ext.ErrPeerNotRegistered) {
		t.Fatalf("send after unregister: %v, want ErrPeerNotRegistered", err)
	}
	// Registering again dials a new connection that works.
	for rx.adapter.Messages().Len() > 0 {
		collect(t, rx, 1)
	}
	tx.register(t, rx)
	mustSend(t, tx.tr, rx.id, 0, seqFrame(9, 9, []byte("again")))
	for {
		fr := collect(t, rx, 1)[0]
		if l, _ := parseSeq(fr); l == 9 {
			break
		}
	}
}

func testMalformed(t *testing.T, f Factory) {
	if f.DialRaw == nil {
		t.Skip("transport has no raw socket")
	}
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{}, 0)
	tx.register(t, rx)
	mustSend(t, tx.tr, rx.id, 0, seqFrame(0, 0, nil))
	collect(t, rx, 1)

	bad, err := f.DialRaw(rx.info.Address[rx.tr.Key()])
	if err != nil {
		t.Fatalf("raw dial: %v", err)
	}
	defer bad.Close()
	// Wrong schema version, then junk.
	bad.Write([]byte{0x00, 0x07, 0x00, 0, 0, 0, 1, 0, 0, 0, 1, 0xFF, 0xFF})
	// Closing is immediate; the deadline only catches a receiver that
	// keeps the connection.
	bad.SetReadDeadline(time.Now().Add(closeLimit))
	var one [1]byte
	n, err := bad.Read(one[:])
	switch {
	case n > 0 || err == nil:
		t.Fatal("receiver answered a malformed frame instead of closing")
	case isTimeout(err):
		// A read deadline fails with os.ErrDeadlineExceeded, a net.Error
		// whose Timeout is true; it is not context.DeadlineExceeded, which
		// this check once compared with, so it passed a receiver that kept
		// the connection open.
		t.Fatalf("receiver kept the malformed connection open for %v", closeLimit)
	case !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET):
		t.Fatalf("reading the malformed connection: %v, want EOF or a reset", err)
	}
	// The good connection still works.
	mustSend(t, tx.tr, rx.id, 0, seqFrame(0, 1, nil))
	if _, s := parseSeq(collect(t, rx, 1)[0]); s != 1 {
		t.Fatalf("good connection broke: got seq %d", s)
	}
}

func testTooLarge(t *testing.T, f Factory) {
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{MaxFrameSize: 1 << 20}, 0)
	tx.register(t, rx)
	_, err := tx.tr.Send(rx.id, ext.Frame{Type: ext.Message, Payload: make([]byte, 1<<20+1)})
	var tl *ext.FrameTooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ext.ErrFrameTooLarge) || tl.Max != 1<<20 {
		t.Fatalf("send of an oversized frame: %v", err)
	}
	if tx.tr.MaxMessageSize() != 1<<20 {
		t.Fatalf("MaxMessageSize = %d", tx.tr.MaxMessageSize())
	}
}

func testUnknownPeer(t *testing.T, f Factory) {
	tx := start(t, f, Options{}, 0)
	_, err := tx.tr.Send(ext.NewInstanceID(), seqFrame(0, 0, nil))
	if !errors.Is(err, ext.ErrPeerNotRegistered) {
		t.Fatalf("send to unknown peer: %v", err)
	}
	tx.tr.Unregister(ext.NewInstanceID()) // never registered: no-op
	if err := tx.tr.CheckHealth(context.Background(), ext.NewInstanceID()); !errors.Is(err, ext.ErrPeerNotRegistered) {
		t.Fatalf("health of unknown peer: %v", err)
	}
}

// lossLimit is how soon a dead peer must be reported lost.
const lossLimit = 100 * time.Millisecond

// losses records the peer-lost reports of an adapter.
type losses struct {
	mu    sync.Mutex
	peers []ext.InstanceID
	errs  []error
	first chan time.Time
}

func recordLosses(a *ext.TransportAdapter) *losses {
	l := &losses{first: make(chan time.Time, 1)}
	a.SetPeerLostHandler(func(peer ext.InstanceID, err error) {
		now := time.Now()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.peers = append(l.peers, peer)
		l.errs = append(l.errs, err)
		if len(l.peers) == 1 {
			l.first <- now
		}
	})
	return l
}

func (l *losses) check(t testing.TB, peer ext.InstanceID, want int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.peers) != want {
		t.Fatalf("%d peer-lost reports (%v), want %d", len(l.peers), l.errs, want)
	}
	for i := range l.peers {
		if l.peers[i] != peer || !errors.Is(l.errs[i], ext.ErrPeerUnreachable) {
			t.Fatalf("peer-lost report %d: peer %v, error %v; want %v and ErrPeerUnreachable", i, l.peers[i], l.errs[i], peer)
		}
	}
}

// testPeerLost kills a peer the sender has a live connection to: the sender
// reports it lost within lossLimit, and only once, even after its own
// shutdown has closed everything that could report again.
func testPeerLost(t *testing.T, f Factory) {
	if f.Kill == nil {
		t.Skip("the factory cannot kill a transport")
	}
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{}, 0)
	lost := recordLosses(tx.adapter)
	tx.register(t, rx)
	mustSend(t, tx.tr, rx.id, 0, seqFrame(0, 0, []byte("hello")))
	collect(t, rx, 1) // the connection is up
	killed := time.Now()
	f.Kill(rx.tr)
	select {
	case at := <-lost.first:
		if d := at.Sub(killed); d > lossLimit {
			t.Fatalf("the dead peer was reported lost %v after it died, want within %v", d, lossLimit)
		}
	case <-time.After(waitLimit):
		t.Fatal("the dead peer was never reported lost")
	}
	tx.tr.Shutdown()
	<-tx.tr.Closed()
	lost.check(t, rx.id, 1)
}

// testOwnShutdownNoLoss: closing our own connections (unregister, then
// shutdown) is not the loss of a peer, which lives on.
func testOwnShutdownNoLoss(t *testing.T, f Factory) {
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{Lanes: 2}, 0)
	lost := recordLosses(tx.adapter)
	tx.register(t, rx)
	for l := 0; l < 2; l++ {
		mustSend(t, tx.tr, rx.id, l, seqFrame(l, 0, nil))
	}
	collect(t, rx, 2)
	tx.tr.Unregister(rx.id)
	tx.register(t, rx)
	mustSend(t, tx.tr, rx.id, 0, seqFrame(0, 1, nil))
	collect(t, rx, 1)
	tx.tr.Shutdown()
	<-tx.tr.Closed()
	lost.check(t, rx.id, 0)
}
