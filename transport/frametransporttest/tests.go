package frametransporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// pair is a listening transport and a dialing one.
type pair struct {
	ln   ext.FrameListener
	dial ext.FrameTransport
	lnT  ext.FrameTransport
}

func newPair(t *testing.T, f Factory) *pair {
	t.Helper()
	lt := f.New(t)
	ln, err := lt.Listen(f.ListenAddr)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	if len(ln.Entry()) == 0 {
		t.Fatal("the listener advertises an empty entry")
	}
	return &pair{ln: ln, lnT: lt, dial: f.New(t)}
}

// accepted is an inbound stream with its route, or Accept's error.
type accepted struct {
	in    ext.FrameInbound
	route ext.StreamRoute
	err   error
}

// acceptN accepts n streams and reads their routes, each on its own
// goroutine as a node does.
func (p *pair) acceptN(t *testing.T, n int) <-chan accepted {
	out := make(chan accepted, n)
	go func() {
		for range n {
			in, err := p.ln.Accept()
			if err != nil {
				out <- accepted{err: err}
				return
			}
			go func() {
				r, err := in.Route()
				out <- accepted{in: in, route: r, err: err}
			}()
		}
	}()
	t.Cleanup(func() {
		for {
			select {
			case a := <-out:
				if a.in != nil {
					a.in.Close()
				}
			default:
				return
			}
		}
	})
	return out
}

func (p *pair) dialRoute(t *testing.T, r ext.StreamRoute) ext.FrameSender {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), prompt)
	defer cancel()
	s, err := p.dial.Dial(ctx, p.ln.Entry(), r)
	if err != nil {
		t.Fatalf("Dial %v: %v", r, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitAccept(t *testing.T, ch <-chan accepted) accepted {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("Accept/Route: %v", a.err)
		}
		return a
	case <-time.After(prompt):
		t.Fatal("no inbound stream")
	}
	return accepted{}
}

// recvWithin reads one frame with a deadline of d.
func recvWithin(in ext.FrameInbound, d time.Duration) ([]byte, error) {
	in.SetReadDeadline(time.Now().Add(d))
	return in.Recv()
}

func frameOf(stream, i int) []byte { return fmt.Appendf(nil, "stream %d frame %d", stream, i) }

func testOrder(t *testing.T, f Factory) {
	p := newPair(t, f)
	acc := p.acceptN(t, 1)
	route := ext.StreamRoute{AnchorID: 1<<63 | 7, SessionID: 1<<64 - 1}
	s := p.dialRoute(t, route)
	a := waitAccept(t, acc)
	if a.route != route {
		t.Fatalf("Route = %+v, want %+v", a.route, route)
	}
	const n = 1000
	go func() {
		for i := 0; i < n; i += 10 {
			batch := make([][]byte, 0, 10)
			for j := i; j < i+10; j++ {
				batch = append(batch, frameOf(0, j))
			}
			if err := s.Send(batch); err != nil {
				return
			}
		}
	}()
	for i := range n {
		got, err := recvWithin(a.in, prompt)
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if want := frameOf(0, i); !bytes.Equal(got, want) {
			t.Fatalf("frame %d = %q, want %q", i, got, want)
		}
	}
	a.in.Confirm()
}

func testLimit(t *testing.T, f Factory) {
	p := newPair(t, f)
	max := p.dial.MaxFrameSize()
	if lm := p.lnT.MaxFrameSize(); lm != max {
		t.Fatalf("MaxFrameSize differs between two transports of one factory: %d, %d", max, lm)
	}
	acc := p.acceptN(t, 1)
	s := p.dialRoute(t, ext.StreamRoute{AnchorID: 1, SessionID: 2})
	a := waitAccept(t, acc)
	sizes := []int{2, 4096, 1 << 20, max}
	errc := make(chan error, 1)
	go func() {
		for _, n := range sizes {
			b := bytes.Repeat([]byte{byte(n)}, n)
			b[0], b[n-1] = 0xa5, 0x5a
			if err := s.Send([][]byte{b}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for _, n := range sizes {
		got, err := recvWithin(a.in, prompt)
		if err != nil {
			t.Fatalf("Recv of a %d-byte frame: %v", n, err)
		}
		if len(got) != n || got[0] != 0xa5 || got[n-1] != 0x5a || (n > 2 && got[n/2] != byte(n)) {
			t.Fatalf("a %d-byte frame arrived as %d bytes, or changed", n, len(got))
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("Send: %v", err)
	}
}

func testOverLimit(t *testing.T, f Factory) {
	p := newPair(t, f)
	acc := p.acceptN(t, 1)
	s := p.dialRoute(t, ext.StreamRoute{AnchorID: 3, SessionID: 4})
	a := waitAccept(t, acc)
	big := make([]byte, p.dial.MaxFrameSize()+1)
	err := s.Send([][]byte{[]byte("before"), big})
	if !errors.Is(err, ext.ErrFrameTooLarge) {
		t.Fatalf("Send of a frame over the limit = %v, want ErrFrameTooLarge", err)
	}
	s.Close()
	// Nothing of the refused batch left: the stream ends with no frame.
	if got, err := recvWithin(a.in, prompt); err == nil {
		t.Fatalf("the listener got a %d-byte frame of a refused batch", len(got))
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the producer's Close did not end the stream")
	}
}

func testConcurrent(t *testing.T, f Factory) {
	p := newPair(t, f)
	const streams, frames = 32, 100
	acc := p.acceptN(t, streams)
	var wg sync.WaitGroup
	for i := range streams {
		s := p.dialRoute(t, ext.StreamRoute{AnchorID: uint64(i), SessionID: 1000 + uint64(i)})
		wg.Go(func() {
			for j := range frames {
				if s.Send([][]byte{frameOf(i, j)}) != nil {
					return
				}
			}
		})
	}
	seen := make(map[uint64]bool)
	var rg sync.WaitGroup
	errs := make(chan error, streams)
	for range streams {
		a := waitAccept(t, acc)
		i := int(a.route.AnchorID)
		if a.route.SessionID != 1000+a.route.AnchorID || seen[a.route.AnchorID] {
			t.Fatalf("route %+v: not one the suite dialed, or twice", a.route)
		}
		seen[a.route.AnchorID] = true
		rg.Go(func() {
			for j := range frames {
				got, err := recvWithin(a.in, prompt)
				if err != nil || !bytes.Equal(got, frameOf(i, j)) {
					errs <- fmt.Errorf("stream %d frame %d: %q, %v", i, j, got, err)
					return
				}
			}
			a.in.Confirm()
		})
	}
	rg.Wait()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// closedWithin waits for s's Closed.
func closedWithin(t *testing.T, s ext.FrameSender, what string) {
	t.Helper()
	select {
	case <-s.Closed():
	case <-time.After(prompt):
		t.Fatalf("%s: the producer's stream did not see it within %v", what, prompt)
	}
}

func testUnknownRoute(t *testing.T, f Factory) {
	p := newPair(t, f)
	acc := p.acceptN(t, 1)
	route := ext.StreamRoute{AnchorID: 5, SessionID: 6}
	dialed := make(chan error, 1)
	var s ext.FrameSender
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), prompt)
		defer cancel()
		var err error
		s, err = p.dial.Dial(ctx, p.ln.Entry(), route)
		dialed <- err
	}()
	a := waitAccept(t, acc)
	a.in.Refuse()
	err := <-dialed
	if err != nil {
		if !errors.Is(err, ext.ErrUnknownRoute) {
			t.Fatalf("Dial of a refused route = %v, want ErrUnknownRoute", err)
		}
		return
	}
	defer s.Close()
	closedWithin(t, s, "a refused route")
	if err := s.Finish(context.Background()); err == nil && f.Confirms {
		t.Fatal("Finish on a refused route = nil")
	}
}

func testConsumerClose(t *testing.T, f Factory) {
	p := newPair(t, f)
	acc := p.acceptN(t, 1)
	s := p.dialRoute(t, ext.StreamRoute{AnchorID: 7, SessionID: 8})
	a := waitAccept(t, acc)
	if err := s.Send([][]byte{[]byte("one")}); err != nil {
		t.Fatal(err)
	}
	if _, err := recvWithin(a.in, prompt); err != nil {
		t.Fatal(err)
	}
	a.in.Close()
	closedWithin(t, s, "the consumer's close")
	// Once Closed is closed, every Send fails: none is taken by a buffer
	// of a stream that is over.
	for i := range 3 {
		if err := s.Send([][]byte{[]byte("more")}); err == nil {
			t.Fatalf("Send %d after Closed = nil, want an error", i)
		}
	}
}

func testFinish(t *testing.T, f Factory) {
	t.Run("confirmed", func(t *testing.T) {
		p := newPair(t, f)
		acc := p.acceptN(t, 1)
		s := p.dialRoute(t, ext.StreamRoute{AnchorID: 9, SessionID: 10})
		a := waitAccept(t, acc)
		if err := s.Send([][]byte{[]byte("item"), []byte("terminal")}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Finish(context.Background()) }()
		for range 2 {
			if _, err := recvWithin(a.in, prompt); err != nil {
				t.Fatal(err)
			}
		}
		a.in.Confirm()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Finish after Confirm = %v", err)
			}
		case <-time.After(prompt):
			t.Fatal("Finish did not return after Confirm")
		}
	})
	if !f.Confirms {
		return
	}
	t.Run("not-confirmed", func(t *testing.T) {
		p := newPair(t, f)
		acc := p.acceptN(t, 1)
		s := p.dialRoute(t, ext.StreamRoute{AnchorID: 11, SessionID: 12})
		a := waitAccept(t, acc)
		if err := s.Send([][]byte{[]byte("terminal")}); err != nil {
			t.Fatal(err)
		}
		if _, err := recvWithin(a.in, prompt); err != nil {
			t.Fatal(err)
		}
		a.in.Close()
		if err := s.Finish(context.Background()); err == nil {
			t.Fatal("Finish = nil, though the consumer closed the stream without Confirm")
		}
	})
}

func testDeadline(t *testing.T, f Factory) {
	p := newPair(t, f)
	acc := p.acceptN(t, 1)
	s := p.dialRoute(t, ext.StreamRoute{AnchorID: 13, SessionID: 14})
	a := waitAccept(t, acc)
	_, err := recvWithin(a.in, 20*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Recv past its deadline = %v, want os.ErrDeadlineExceeded", err)
	}
	if err := s.Send([][]byte{[]byte("after the deadline")}); err != nil {
		t.Fatal(err)
	}
	got, err := recvWithin(a.in, prompt)
	if err != nil || string(got) != "after the deadline" {
		t.Fatalf("Recv after a passed deadline = %q, %v: the stream must stay intact", got, err)
	}
	// The zero time lifts a deadline that has passed: a Recv that still
	// honoured it would fail at once, whether the frame below reaches the
	// stream before the Recv waits or after.
	a.in.SetReadDeadline(time.Now().Add(-time.Second))
	a.in.SetReadDeadline(time.Time{})
	sent := make(chan error, 1)
	go func() { sent <- s.Send([][]byte{[]byte("no deadline")}) }()
	if got, err := a.in.Recv(); err != nil || string(got) != "no deadline" {
		t.Fatalf("Recv with no deadline = %q, %v", got, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

func testProducerGone(t *testing.T, f Factory) {
	p := newPair(t, f)
	acc := p.acceptN(t, 1)
	s := p.dialRoute(t, ext.StreamRoute{AnchorID: 15, SessionID: 16})
	a := waitAccept(t, acc)
	if err := s.Send([][]byte{[]byte("one")}); err != nil {
		t.Fatal(err)
	}
	if _, err := recvWithin(a.in, prompt); err != nil {
		t.Fatal(err)
	}
	s.Close() // no terminal: the producer's node went
	_, err := recvWithin(a.in, prompt)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Recv after the producer went = %v, want the stream's end within %v", err, prompt)
	}
}

func testShutdown(t *testing.T, f Factory) {
	p := newPair(t, f)
	acc := p.acceptN(t, 2)
	s1 := p.dialRoute(t, ext.StreamRoute{AnchorID: 17, SessionID: 18})
	s2 := p.dialRoute(t, ext.StreamRoute{AnchorID: 19, SessionID: 20})
	a1, a2 := waitAccept(t, acc), waitAccept(t, acc)
	reading := make(chan error, 1)
	go func() {
		_, err := recvWithin(a1.in, prompt)
		reading <- err
	}()
	closed := make(chan struct{})
	go func() {
		p.ln.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(prompt):
		t.Fatal("the listener's Close did not return with streams open")
	}
	if err := <-reading; err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a Recv in progress as the listener closed = %v, want the stream's end", err)
	}
	closedWithin(t, s1, "the listener's close")
	closedWithin(t, s2, "the listener's close")
	a1.in.Close()
	a2.in.Close()
	if _, err := p.ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
	}
	p.ln.Close() // idempotent
}

func testMalformed(t *testing.T, f Factory) {
	if f.DialRaw == nil || len(f.Malformed) == 0 {
		t.Skip("no DialRaw")
	}
	for i, bad := range f.Malformed {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			p := newPair(t, f)
			acc := p.acceptN(t, 1)
			ctx, cancel := context.WithTimeout(context.Background(), prompt)
			defer cancel()
			w, err := f.DialRaw(ctx, p.ln.Entry(), ext.StreamRoute{AnchorID: 21, SessionID: 22})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			a := waitAccept(t, acc)
			w.Write(bad)
			w.Close()
			got, err := recvWithin(a.in, prompt)
			if err == nil {
				t.Fatalf("malformed input %x: Recv returned a %d-byte frame", bad, len(got))
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("malformed input %x: the stream did not end", bad)
			}
		})
	}
}

// killedStream is a stream that carried one frame, for the kill tests.
func killedStream(t *testing.T, f Factory, route ext.StreamRoute) (*pair, ext.FrameSender, accepted) {
	t.Helper()
	p := newPair(t, f)
	acc := p.acceptN(t, 1)
	s := p.dialRoute(t, route)
	a := waitAccept(t, acc)
	if err := s.Send([][]byte{[]byte("before")}); err != nil {
		t.Fatal(err)
	}
	if _, err := recvWithin(a.in, prompt); err != nil {
		t.Fatal(err)
	}
	return p, s, a
}

// testConsumerDies kills the listening transport mid-stream: the
// producer's stream closes, its Send fails and (with Confirms) its Finish
// too, well before a keep-alive or retransmission timeout could say so;
// the killed end's own Recv in progress returns.
func testConsumerDies(t *testing.T, f Factory) {
	if f.Kill == nil {
		t.Skip("no Kill")
	}
	p, s, a := killedStream(t, f, ext.StreamRoute{AnchorID: 23, SessionID: 24})
	reading := make(chan error, 1)
	go func() {
		_, err := a.in.Recv()
		reading <- err
	}()
	f.Kill(p.lnT)
	closedWithin(t, s, "the consumer's death")
	if err := s.Send([][]byte{[]byte("after")}); err == nil {
		t.Fatal("Send to a consumer that died = nil")
	}
	if f.Confirms {
		if err := s.Finish(context.Background()); err == nil {
			t.Fatal("Finish to a consumer that died = nil")
		}
	}
	select {
	case err := <-reading:
		if err == nil {
			t.Fatal("a Recv on the killed end returned a frame")
		}
	case <-time.After(prompt):
		t.Fatal("a Recv on the killed end did not return")
	}
}

// testProducerDies kills the dialing transport mid-stream: the consumer's
// Recv fails at once (no deadline set, so only the stream's end can end
// it), and not with io.EOF, which says the producer ended in order.
func testProducerDies(t *testing.T, f Factory) {
	if f.Kill == nil {
		t.Skip("no Kill")
	}
	p, _, a := killedStream(t, f, ext.StreamRoute{AnchorID: 25, SessionID: 26})
	reading := make(chan error, 1)
	go func() {
		_, err := a.in.Recv()
		reading <- err
	}()
	f.Kill(p.dial)
	select {
	case err := <-reading:
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("Recv after the producer died = %v, want the stream's failure", err)
		}
	case <-time.After(prompt):
		a.in.Close()
		t.Fatalf("Recv did not fail within %v of the producer's death", prompt)
	}
}
