package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// rawPlane is the raw arm: the floor under any response plane written in
// Go with a goroutine per request, and no protocol. Each engine holds one
// TCP connection per frontend and, at the end of every forward pass,
// writes the pass's tokens for that frontend in one write; a reader
// goroutine per connection hands each token to its request's consumer
// over a channel. There is no attach, no credit, no flow control and no
// error path beyond the run's context: it is a baseline, not a design.
//
// Wire: a batch is a 4-byte big-endian length, then records of an 8-byte
// request id, a 2-byte payload length and the payload; a length of
// 0xFFFF ends the request.
//
// rawFronts and rawEngines are its halves; under --procs a child holds one
// of them, and the engines dial the listeners the parent forwards.
type rawPlane struct {
	*rawFronts
	*rawEngines
}

// rawFronts is the frontend half: a listener per frontend.
type rawFronts struct {
	fronts []*rawFront
	stop   func() bool // the context.AfterFunc that ends the consumers
	tokens int         // each request's channel holds them all and its end
}

// rawEngines is the engine half: each engine's connections, by frontend.
type rawEngines struct {
	engines []*rawEngine
	// writeFailed, when set, is told that a pass's write to frontend h
	// failed (in-process: it ends that frontend's consumers).
	writeFailed func(h int, err error)
}

const rawEnd = 0xFFFF

type rawFront struct {
	ln      net.Listener
	readers sync.WaitGroup

	mu     sync.Mutex
	reqs   map[uint64]chan []byte
	conns  []net.Conn
	closed bool
	cause  error // why end closed the channels; set before it closes them
}

type rawEngine struct {
	conns []net.Conn // by frontend
	bufs  [][]byte   // the pass's batch, by frontend: 4 bytes for its length, then records
	err   error      // a failed write, returned by the next send
}

func newRawPlane(ctx context.Context, cfg ResponsePlaneConfig) (*rawPlane, error) {
	f, err := newRawFronts(ctx, cfg, cfg.AnchorHosts)
	if err != nil {
		return nil, err
	}
	e, err := newRawEngines(cfg, cfg.Engines, f.addrs())
	if err != nil {
		f.close()
		return nil, err
	}
	e.writeFailed = func(h int, err error) { f.fronts[h].end(err) }
	return &rawPlane{rawFronts: f, rawEngines: e}, nil
}

// newRawFronts starts n frontends, each listening on loopback TCP.
func newRawFronts(ctx context.Context, cfg ResponsePlaneConfig, n int) (*rawFronts, error) {
	p := &rawFronts{tokens: cfg.Tokens}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.close()
			return nil, err
		}
		f := &rawFront{ln: ln, reqs: make(map[uint64]chan []byte)}
		p.fronts = append(p.fronts, f)
		f.readers.Add(1)
		go f.accept()
	}
	// A failed run ends every consumer still waiting (with a short
	// stream, which it reports).
	p.stop = context.AfterFunc(ctx, func() {
		for _, f := range p.fronts {
			f.end(context.Cause(ctx))
		}
	})
	return p, nil
}

// addrs are the frontends' listening addresses, by frontend.
func (p *rawFronts) addrs() []string {
	out := make([]string, len(p.fronts))
	for h, f := range p.fronts {
		out[h] = f.ln.Addr().String()
	}
	return out
}

// newRawEngines starts n engines, each connected to every frontend of
// fronts (addresses by frontend).
func newRawEngines(cfg ResponsePlaneConfig, n int, fronts []string) (*rawEngines, error) {
	p := &rawEngines{}
	for range n {
		e := &rawEngine{bufs: make([][]byte, cfg.AnchorHosts)}
		p.engines = append(p.engines, e)
		for _, addr := range fronts {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				p.close()
				return nil, err
			}
			e.conns = append(e.conns, c)
		}
	}
	return p, nil
}

func (f *rawFront) accept() {
	defer f.readers.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		f.readers.Add(1)
		go func() {
			defer f.readers.Done()
			if err := f.read(c); err != nil {
				f.end(err) // its consumers stop with the cause, not the run's timeout
			}
		}()
	}
}

// read hands each record of each batch to its request's channel. A batch
// is read into its own buffer: the consumers keep the tokens. It returns
// nil when the connection closes between batches, else what went wrong.
func (f *rawFront) read(c net.Conn) error {
	r := bufio.NewReaderSize(c, 64<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			return nil
		} else if err != nil {
			return fmt.Errorf("raw plane: read: %w", err)
		}
		b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("raw plane: read: %w", err)
		}
		if err := f.deliver(b); err != nil {
			return err
		}
	}
}

// deliver hands the records of batch b to their requests.
func (f *rawFront) deliver(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(b) >= 10 && !f.closed {
		id, n := binary.BigEndian.Uint64(b), int(binary.BigEndian.Uint16(b[8:]))
		ch := f.reqs[id]
		switch {
		case ch == nil:
			return fmt.Errorf("raw plane: a record for request %d, which is not open", id)
		case n == rawEnd:
			delete(f.reqs, id)
			close(ch)
			b = b[10:]
		case 10+n > len(b):
			return fmt.Errorf("raw plane: a record of %d bytes past its batch", n)
		default:
			ch <- b[10 : 10+n : 10+n] // never blocks: it holds every token
			b = b[10+n:]
		}
	}
	return nil
}

// end closes every request's channel: their consumers stop with cause.
func (f *rawFront) end(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed, f.cause = true, cause
	for id, ch := range f.reqs {
		close(ch)
		delete(f.reqs, id)
	}
}

func (p *rawFronts) open(_ context.Context, i, h, _ int, consume func(func() ([]byte, error)) error) (any, error) {
	f := p.fronts[h]
	ch := make(chan []byte, p.tokens+1)
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errors.New("raw plane closed")
	}
	f.reqs[uint64(i)] = ch
	f.mu.Unlock()
	go consume(func() ([]byte, error) {
		tok, ok := <-ch
		if ok {
			return tok, nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.cause != nil {
			return nil, f.cause
		}
		return nil, io.EOF
	})
	return rawReq{id: uint64(i), front: h}, nil
}

type rawReq struct {
	id    uint64
	front int
}

type rawStream struct {
	e   *rawEngine
	req rawReq
}

func (p *rawEngines) bind(_ context.Context, e int, req any) (rpStream, error) {
	return rawStream{e: p.engines[e], req: req.(rawReq)}, nil
}

func (s rawStream) send(ctx context.Context, tok []byte) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if len(tok) >= rawEnd {
		return fmt.Errorf("raw plane: token of %d bytes", len(tok))
	}
	return s.record(tok, uint16(len(tok)))
}

func (s rawStream) finish() error { return s.record(nil, rawEnd) }

func (s rawStream) record(tok []byte, n uint16) error {
	if s.e.err != nil {
		return s.e.err
	}
	b := s.e.bufs[s.req.front]
	if len(b) == 0 {
		b = append(b, 0, 0, 0, 0) // the batch length, set by pass
	}
	b = binary.BigEndian.AppendUint64(b, s.req.id)
	b = binary.BigEndian.AppendUint16(b, n)
	s.e.bufs[s.req.front] = append(b, tok...)
	return nil
}

// pass writes each frontend's records of the pass in one write.
func (p *rawEngines) pass(e int) {
	en := p.engines[e]
	for h, b := range en.bufs {
		if len(b) == 0 {
			continue
		}
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		if _, err := en.conns[h].Write(b); err != nil && en.err == nil {
			// Its requests on that frontend will never end: stop their
			// consumers with the cause.
			en.err = fmt.Errorf("raw plane: write: %w", err)
			if p.writeFailed != nil {
				p.writeFailed(h, en.err)
			}
		}
		en.bufs[h] = b[:0]
	}
}

func (p *rawEngines) close() {
	for _, e := range p.engines {
		for _, c := range e.conns {
			c.Close()
		}
	}
}

func (p *rawFronts) close() {
	if p.stop != nil {
		p.stop()
	}
	for _, f := range p.fronts {
		f.ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.readers.Wait()
		f.end(errors.New("raw plane closed"))
	}
}

// close ends the consumers' watch, closes the engines' connections, then
// the frontends, as one plane.
func (p *rawPlane) close() {
	if p.stop != nil {
		p.stop()
	}
	p.rawEngines.close()
	p.rawFronts.close()
}
