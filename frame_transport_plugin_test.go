package velo_test

// A frame transport from outside the module: this file's memFrames uses
// the standard library and ext only, as a third party's would, passes the
// conformance suite and carries a node's streams end to end.

import (
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
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/frametransporttest"
)

// memNet is an in-process network of frame listeners, by entry.
type memNet struct {
	mu   sync.Mutex
	next int
	lns  map[string]*memListener
}

// memFrames is the transport, key "mem-stream".
type memFrames struct{ net *memNet }

func (m memFrames) Key() ext.TransportKey { return "mem-stream" }
func (m memFrames) MaxFrameSize() int     { return 1 << 20 }

func (m memFrames) Listen(string) (ext.FrameListener, error) {
	n := m.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	l := &memListener{net: n, entry: fmt.Appendf(nil, "mem:%d", n.next), accept: make(chan *memStream), closed: make(chan struct{}), open: map[*memStream]bool{}}
	n.lns[string(l.entry)] = l
	return l, nil
}

func (m memFrames) Dial(ctx context.Context, entry []byte, r ext.StreamRoute) (ext.FrameSender, error) {
	m.net.mu.Lock()
	l := m.net.lns[string(entry)]
	m.net.mu.Unlock()
	if l == nil {
		return nil, errors.New("mem: no such listener")
	}
	s := &memStream{route: r, q: make(chan []byte, 64), fin: make(chan struct{}), gone: make(chan struct{}), ended: make(chan struct{}), closed: make(chan struct{})}
	select {
	case l.accept <- s:
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	go func() { // the producer's view: the consumer's end closes Closed
		<-s.ended
		s.closeOnce.Do(func() { close(s.closed) })
	}()
	return (*memSender)(s), nil
}

type memListener struct {
	net    *memNet
	entry  []byte
	accept chan *memStream
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	open   map[*memStream]bool
}

func (l *memListener) Entry() []byte  { return l.entry }
func (l *memListener) Addr() net.Addr { return nil }

func (l *memListener) Accept() (ext.FrameInbound, error) {
	select {
	case s := <-l.accept:
		l.mu.Lock()
		l.open[s] = true
		l.mu.Unlock()
		return (*memInbound)(s), nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.net.mu.Lock()
		delete(l.net.lns, string(l.entry))
		l.net.mu.Unlock()
		l.mu.Lock()
		for s := range l.open {
			(*memInbound)(s).Close()
		}
		l.mu.Unlock()
	})
	return nil
}

// memStream is one stream: the frames, the producer's half-close (fin)
// or loss (gone), and the consumer's end (ended, with how).
type memStream struct {
	route     ext.StreamRoute
	q         chan []byte
	fin, gone chan struct{}
	finOnce   sync.Once
	goneOnce  sync.Once
	ended     chan struct{}
	endOnce   sync.Once
	confirmed bool // set before ended closes
	closed    chan struct{}
	closeOnce sync.Once
	deadline  time.Time
}

type memInbound memStream

func (in *memInbound) Route() (ext.StreamRoute, error) { return in.route, nil }

func (in *memInbound) Recv() ([]byte, error) {
	select { // frames already sent come first
	case p := <-in.q:
		return p, nil
	default:
	}
	var timeout <-chan time.Time
	if !in.deadline.IsZero() {
		t := time.NewTimer(time.Until(in.deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case p := <-in.q:
		return p, nil
	case <-in.fin:
		select {
		case p := <-in.q:
			return p, nil
		default:
			return nil, io.EOF
		}
	case <-in.gone:
		return nil, io.ErrUnexpectedEOF
	case <-in.ended:
		return nil, ext.ErrStreamClosed
	case <-timeout:
		return nil, os.ErrDeadlineExceeded
	}
}

func (in *memInbound) SetReadDeadline(t time.Time) error { in.deadline = t; return nil }

func (in *memInbound) end(confirmed bool) error {
	in.endOnce.Do(func() {
		in.confirmed = confirmed
		close(in.ended)
	})
	return nil
}

func (in *memInbound) Confirm() error { return in.end(true) }
func (in *memInbound) Refuse() error  { return in.end(false) }
func (in *memInbound) Close() error   { return in.end(false) }

type memSender memStream

func (s *memSender) Send(frames [][]byte) error {
	for _, f := range frames {
		if len(f) > 1<<20 {
			return ext.ErrFrameTooLarge
		}
	}
	select { // a stream that is over takes nothing, though its queue has room
	case <-s.ended:
		return ext.ErrStreamClosed
	case <-s.closed:
		return ext.ErrStreamClosed
	default:
	}
	for _, f := range frames {
		select {
		case s.q <- append([]byte(nil), f...):
		case <-s.ended:
			return ext.ErrStreamClosed
		case <-s.closed:
			return ext.ErrStreamClosed
		}
	}
	return nil
}

func (s *memSender) Finish(ctx context.Context) error {
	s.finOnce.Do(func() { close(s.fin) })
	select {
	case <-s.ended: // Close ends it too
		if s.confirmed {
			return nil
		}
		return ext.ErrStreamClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *memSender) Closed() <-chan struct{} { return s.closed }

func (s *memSender) Close() error {
	s.goneOnce.Do(func() { close(s.gone) })
	s.closeOnce.Do(func() { close(s.closed) })
	(*memInbound)(s).end(false) // frees the watcher goroutine of Dial
	return nil
}

func TestOutOfTreeFrameTransportConformance(t *testing.T) {
	n := &memNet{lns: map[string]*memListener{}}
	frametransporttest.Run(t, frametransporttest.Factory{
		New:      func(testing.TB) ext.FrameTransport { return memFrames{net: n} },
		Confirms: true,
	})
}

// Two nodes whose per-stream path is memFrames stream items in order,
// and the producer retires Sent.
func TestOutOfTreeFrameTransportCarriesAStream(t *testing.T) {
	n := &memNet{lns: map[string]*memListener{}}
	consumer := newTCPNodeNoMuxWith(t, memFrames{net: n})
	producer := newTCPNodeNoMuxWith(t, memFrames{net: n})
	if err := producer.RegisterPeer(consumer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	a, err := streaming.CreateAnchor[string](consumer.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := streaming.AttachAnchor[string](ctx, producer.Streams, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.NegotiatedTransport(); got != "mem-stream" {
		t.Fatalf("negotiated %q", got)
	}
	go func() {
		for i := range 100 {
			if s.Send(ctx, fmt.Sprint(i)) != nil {
				return
			}
		}
		s.Finalize()
	}()
	for i := range 100 {
		if v, err := a.Next(ctx); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("item %d = %q, %v", i, v, err)
		}
	}
	if _, err := a.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	<-s.Retired()
	if s.Outcome() != streaming.RetireSent {
		t.Fatalf("outcome %v", s.Outcome())
	}
}
