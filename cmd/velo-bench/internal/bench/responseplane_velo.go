package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/streamx"
	"github.com/velo-go/velo/streaming"
)

// The velo arms are split into their two halves: veloFronts (the anchor
// hosts) and veloEngines (the producers). In-process, veloPlane holds
// both and registers every frontend with every engine; under --procs each
// child builds the half of its role with one node, and the parent passes
// the PeerInfos between them.

// veloArm is what an arm's name means for the velo halves: the two mux
// configs, the transport every Sender must negotiate, and whether the
// frontend pre-binds (mux-zero-rtt).
type veloArm struct {
	host, engine streaming.MuxConfig
	wantKey      string
	zeroRTT      bool
}

// veloArmOf returns the velo setup of arm; ok is false for the non-velo arms.
func veloArmOf(cfg ResponsePlaneConfig, arm string) (a veloArm, ok bool) {
	switch arm {
	case "mux", "mux-zero-rtt":
		a.host = streaming.MuxConfig{InitialCredit: cfg.InitialCredit}
		if cfg.FrontendFlush == "manual" {
			a.host.Flush = streaming.FlushManual
		}
		a.engine, a.wantKey, a.zeroRTT = engineMuxConfig(cfg), "messenger-mux-v2", arm == "mux-zero-rtt"
		return a, true
	case "per-stream":
		off := streaming.MuxConfig{Disabled: true}
		a.host, a.engine, a.wantKey = off, off, wire.TCPStreamKey
		return a, true
	}
	return a, false
}

// veloPlane is the velo arms in one process: AnchorHosts frontend nodes
// and Engines engine nodes, each its own velo node on loopback TCP, every
// frontend registered with every engine.
type veloPlane struct {
	*veloFronts
	*veloEngines
}

// veloFronts is the frontend half: nodes that own the anchors.
type veloFronts struct {
	hosts []*velo.Node
	// zeroRTT: the frontend pre-binds at registration and the engine
	// opens from the ticket (mux-zero-rtt).
	zeroRTT bool
	wantKey string
}

// veloEngines is the engine half: nodes that attach (or open from a
// ticket) and send the tokens.
type veloEngines struct {
	engines []*velo.Node
	wantKey string
	manual  bool
	zeroRTT bool
	// attachTaps count the _anchor_attach requests each engine sends (the
	// mux arms): the zero-RTT arm must send none.
	attachTaps []*attachTap
}

// attachTap wraps a transport and counts the _anchor_attach requests
// handed to it; frames pass on unchanged.
type attachTap struct {
	tapped
	n atomic.Uint64
}

func (t *attachTap) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	t.look(f)
	return t.Transport.Send(target, f)
}

func (t *attachTap) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	t.look(f)
	return t.Transport.SendOnLane(target, lane, f)
}

func (t *attachTap) look(f ext.Frame) {
	if f.Type != ext.Message {
		return
	}
	if name, ok := handlerBytes(f.Header); ok && string(name) == wire.AnchorAttachHandler {
		t.n.Add(1)
	}
}

// attaches is the _anchor_attach requests the engines sent.
func (p *veloEngines) attaches() uint64 {
	var n uint64
	for _, t := range p.attachTaps {
		n += t.n.Load()
	}
	return n
}

// checkAttaches says whether n requests made the attaches they should:
// every mux request attaches once, a zero-RTT request never. Untapped
// engines (the per-stream arm) always pass.
func checkAttaches(tapped, zeroRTT bool, got uint64, n int) error {
	switch {
	case !tapped:
	case zeroRTT && got != 0:
		return fmt.Errorf("the engines sent %d _anchor_attach requests, want none", got)
	case !zeroRTT && got < uint64(n):
		return fmt.Errorf("the engines sent %d _anchor_attach requests for %d requests", got, n)
	}
	return nil
}

// rpTicketed is a mux-zero-rtt request as it is dispatched: the anchor's
// handle and the ticket the frontend minted for it.
type rpTicketed struct {
	handle wire.AnchorHandle
	ticket streaming.StreamOpenTicket
}

func newVeloPlane(ctx context.Context, cfg ResponsePlaneConfig, a veloArm) (*veloPlane, error) {
	f, err := newVeloFronts(ctx, cfg, cfg.AnchorHosts, a)
	if err != nil {
		return nil, err
	}
	e, err := newVeloEngines(ctx, cfg, cfg.Engines, a)
	if err != nil {
		f.close()
		return nil, err
	}
	p := &veloPlane{veloFronts: f, veloEngines: e}
	for _, h := range f.hosts {
		for _, e := range e.engines {
			if err := h.RegisterPeer(e.PeerInfo()); err != nil {
				p.close()
				return nil, err
			}
			if err := e.RegisterPeer(h.PeerInfo()); err != nil {
				p.close()
				return nil, err
			}
		}
	}
	return p, nil
}

// startVeloNode starts a velo node of the run on tr (a fresh TCP
// transport when nil).
func startVeloNode(ctx context.Context, cfg ResponsePlaneConfig, tr ext.Transport, mc streaming.MuxConfig) (*velo.Node, error) {
	if tr == nil {
		var err error
		if tr, err = cfg.newTCP(); err != nil {
			return nil, err
		}
	}
	return velo.New(ctx, velo.WithTransport(tr), velo.WithMux(mc))
}

func newVeloFronts(ctx context.Context, cfg ResponsePlaneConfig, n int, a veloArm) (*veloFronts, error) {
	f := &veloFronts{zeroRTT: a.zeroRTT, wantKey: a.wantKey}
	for range n {
		node, err := startVeloNode(ctx, cfg, nil, a.host)
		if err != nil {
			f.close()
			return nil, err
		}
		f.hosts = append(f.hosts, node)
	}
	return f, nil
}

func newVeloEngines(ctx context.Context, cfg ResponsePlaneConfig, n int, a veloArm) (*veloEngines, error) {
	p := &veloEngines{wantKey: a.wantKey, zeroRTT: a.zeroRTT,
		manual: !a.engine.Disabled && a.engine.Flush == streaming.FlushManual}
	for range n {
		var tr ext.Transport
		if !a.engine.Disabled {
			// The mux arms count the engines' attach requests.
			t, err := cfg.newTCP()
			if err != nil {
				p.close()
				return nil, err
			}
			tap := &attachTap{tapped: tapped{t}}
			p.attachTaps = append(p.attachTaps, tap)
			tr = tap
		}
		node, err := startVeloNode(ctx, cfg, tr, a.engine)
		if err != nil {
			p.close()
			return nil, err
		}
		p.engines = append(p.engines, node)
	}
	return p, nil
}

func (p *veloFronts) open(ctx context.Context, i, h, e int, consume func(func() ([]byte, error)) error) (any, error) {
	a, err := streaming.CreateAnchor[[]byte](p.hosts[h].Streams)
	if err != nil {
		return nil, err
	}
	var req any = a.Handle()
	if p.zeroRTT {
		// Registration mints the ticket, as a serving frontend does
		// before it hands the request to an engine.
		tk, err := p.hosts[h].Streams.PrebindAnchor(a.Handle())
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("prebind: %w", err)
		}
		req = rpTicketed{handle: a.Handle(), ticket: tk}
	}
	go func() {
		defer a.Close()
		consume(func() ([]byte, error) { return a.NextBytes(ctx) })
	}()
	return req, nil
}

type veloStream struct{ s *streaming.Sender[[]byte] }

func (p *veloEngines) bind(ctx context.Context, e int, req any) (rpStream, error) {
	var s *streaming.Sender[[]byte]
	var err error
	if p.zeroRTT {
		t := req.(rpTicketed)
		s, err = streaming.OpenAnchorStream[[]byte](ctx, p.engines[e].Streams, t.handle, t.ticket)
	} else {
		s, err = streaming.AttachAnchor[[]byte](ctx, p.engines[e].Streams, req.(wire.AnchorHandle))
	}
	if err != nil {
		return nil, err
	}
	if got := s.NegotiatedTransport(); got != p.wantKey {
		s.Close()
		return nil, fmt.Errorf("negotiated %q, want %q", got, p.wantKey)
	}
	return veloStream{s: s}, nil
}

func (s veloStream) send(ctx context.Context, tok []byte) error { return s.s.SendBytes(ctx, tok) }

func (s veloStream) finish() error {
	err := s.s.Finalize()
	s.s.Close()
	return err
}

func (p *veloEngines) pass(e int) {
	if p.manual {
		p.engines[e].Streams.FlushBatch()
	}
}

func (p *veloEngines) wakes() rpWakes {
	var w rpWakes
	for _, n := range p.engines {
		st := streamx.MuxStats(n.Streams)
		w.EngineBatcher += st.BatcherWakes
		w.EngineBatches += st.BatchesSent
		w.CreditExhausted += st.CreditExhausted
	}
	return w
}

func (p *veloFronts) wakes() rpWakes {
	var w rpWakes
	for _, n := range p.hosts {
		st := streamx.MuxStats(n.Streams)
		w.HostBatcher += st.BatcherWakes
		w.HostBatches += st.BatchesSent
		w.HostConsumer += streamx.ConsumerWakes(n.Streams)
	}
	return w
}

func (p *veloEngines) muxed() bool { return p.wantKey != wire.TCPStreamKey }
func (p *veloFronts) muxed() bool  { return p.wantKey != wire.TCPStreamKey }

func (p *veloEngines) close() {
	for _, n := range p.engines {
		shutdownWithin(n, 5*time.Second)
	}
}

func (p *veloFronts) close() {
	for _, n := range p.hosts {
		shutdownWithin(n, 5*time.Second)
	}
}

func (p *veloPlane) wakes() rpWakes { return p.veloEngines.wakes().add(p.veloFronts.wakes()) }
func (p *veloPlane) muxed() bool    { return p.veloEngines.muxed() }

// close shuts the engines down first, then the frontends, as one plane.
func (p *veloPlane) close() {
	p.veloEngines.close()
	p.veloFronts.close()
}
