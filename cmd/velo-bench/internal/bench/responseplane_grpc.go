package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"google.golang.org/grpc"
)

const rpGRPCMethod = "/velo.bench.Tokens/Generate"

// grpcPlane is the grpc arm: each engine is a grpc-go server, each
// frontend holds one ClientConn (one HTTP/2 connection) per engine, and
// each request is one server-streaming call. The frontend opens the call
// when it dispatches the request, sending the request id; the server
// handler parks the stream under that id until the engine admits the
// request and streams its tokens, then returns (the trailers end it).
// grpcFronts and grpcEngines are its halves; under --procs a child holds
// one of them, and the frontends dial the targets the parent forwards.
type grpcPlane struct {
	*grpcFronts
	*grpcEngines
}

// grpcFronts is the client half: conns[h][e] is frontend h's connection
// to engine e.
type grpcFronts struct {
	conns [][]*grpc.ClientConn
}

// grpcEngines is the server half.
type grpcEngines struct {
	engines []*grpcEngine
}

type grpcEngine struct {
	target string
	stop   func()
	mu     sync.Mutex
	calls  map[uint64]*rpCall
}

// rpCall is one request's call as the engine's server sees it.
type rpCall struct {
	ready chan struct{} // closed when the handler parked ss
	ss    grpc.ServerStream
	done  chan struct{} // closed by the engine after the last token
}

// call returns the entry for id, creating it: the handler and the engine
// may reach it in either order.
func (g *grpcEngine) call(id uint64) *rpCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.calls[id]
	if c == nil {
		c = &rpCall{ready: make(chan struct{}), done: make(chan struct{})}
		g.calls[id] = c
	}
	return c
}

func (g *grpcEngine) forget(id uint64) {
	g.mu.Lock()
	delete(g.calls, id)
	g.mu.Unlock()
}

func (g *grpcEngine) handle(_ any, ss grpc.ServerStream) error {
	var req []byte
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	if len(req) != 8 {
		return errors.New("bad request")
	}
	c := g.call(binary.BigEndian.Uint64(req))
	c.ss = ss
	close(c.ready)
	select {
	case <-c.done:
		return nil
	case <-ss.Context().Done():
		return ss.Context().Err()
	}
}

func newGRPCPlane(cfg ResponsePlaneConfig) (*grpcPlane, error) {
	e, err := newGRPCEngines(cfg.Engines)
	if err != nil {
		return nil, err
	}
	f, err := newGRPCFronts(cfg.AnchorHosts, e.targets())
	if err != nil {
		e.close()
		return nil, err
	}
	return &grpcPlane{grpcFronts: f, grpcEngines: e}, nil
}

// newGRPCEngines starts n servers on loopback TCP.
func newGRPCEngines(n int) (*grpcEngines, error) {
	p := &grpcEngines{}
	for range n {
		g := &grpcEngine{calls: make(map[uint64]*rpCall)}
		ln, cleanup, err := listen("tcp")
		if err != nil {
			p.close()
			return nil, err
		}
		// No cap on concurrent streams: every dispatched request holds
		// its call open while it waits for a batch slot, as a velo
		// anchor waits for its attach.
		s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.MaxConcurrentStreams(math.MaxUint32))
		s.RegisterService(&grpc.ServiceDesc{
			ServiceName: "velo.bench.Tokens",
			HandlerType: (*any)(nil),
			Streams: []grpc.StreamDesc{{
				StreamName: "Generate", Handler: g.handle, ServerStreams: true, ClientStreams: false,
			}},
		}, struct{}{})
		served := make(chan struct{})
		go func() {
			defer close(served)
			s.Serve(ln)
		}()
		g.stop = func() {
			s.Stop()
			<-served
			cleanup()
		}
		p.engines = append(p.engines, g)
		g.target = ln.Addr().String()
	}
	return p, nil
}

// targets are the servers' addresses, by engine.
func (p *grpcEngines) targets() []string {
	out := make([]string, len(p.engines))
	for e, g := range p.engines {
		out[e] = g.target
	}
	return out
}

// newGRPCFronts makes hosts frontends with a connection to every target.
func newGRPCFronts(hosts int, targets []string) (*grpcFronts, error) {
	p := &grpcFronts{}
	for range hosts {
		row := make([]*grpc.ClientConn, 0, len(targets))
		for _, t := range targets {
			cc, err := grpcClient(t)
			if err != nil {
				p.conns = append(p.conns, row)
				p.close()
				return nil, err
			}
			row = append(row, cc)
		}
		p.conns = append(p.conns, row)
	}
	return p, nil
}

func (p *grpcFronts) open(ctx context.Context, i, h, e int, consume func(func() ([]byte, error)) error) (any, error) {
	cs, err := p.conns[h][e].NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, rpGRPCMethod)
	if err != nil {
		return nil, err
	}
	id := binary.BigEndian.AppendUint64(nil, uint64(i))
	if err := cs.SendMsg(&id); err != nil {
		return nil, err
	}
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	go func() {
		var buf []byte
		consume(func() ([]byte, error) {
			if err := cs.RecvMsg(&buf); err != nil {
				return nil, err // io.EOF after the trailers of a call that ended well
			}
			return buf, nil
		})
	}()
	return uint64(i), nil
}

type grpcStream struct {
	g  *grpcEngine
	id uint64
	c  *rpCall
}

func (p *grpcEngines) bind(ctx context.Context, e int, req any) (rpStream, error) {
	g := p.engines[e]
	id := req.(uint64)
	c := g.call(id)
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return grpcStream{g: g, id: id, c: c}, nil
}

func (s grpcStream) send(_ context.Context, tok []byte) error {
	if err := s.c.ss.SendMsg(&tok); err != nil {
		return fmt.Errorf("grpc send: %w", err)
	}
	return nil
}

func (s grpcStream) finish() error {
	s.g.forget(s.id)
	close(s.c.done)
	return nil
}

func (p *grpcEngines) pass(int) {}

func (p *grpcFronts) close() {
	for _, row := range p.conns {
		for _, cc := range row {
			cc.Close()
		}
	}
}

func (p *grpcEngines) close() {
	for _, g := range p.engines {
		if g.stop != nil {
			g.stop()
		}
	}
}

// close closes the clients first, then stops the servers, as one plane.
func (p *grpcPlane) close() {
	p.grpcFronts.close()
	p.grpcEngines.close()
}
