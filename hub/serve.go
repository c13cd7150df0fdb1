package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// New checks the config and the bundle and extension graph (step 1 of
// startup; it does no I/O) and returns a hub that Serve starts.
func New(cfg Config, opts ...Option) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, op := range opts {
		op.apply(&o)
	}
	h := &Hub{cfg: cfg, log: o.log, id: protocol.NewHubID(), st: o.st, timing: defaultTiming(),
		lock: make(chan struct{}, 1), stopping: make(chan struct{}), loopsStop: make(chan struct{}),
		stopped: make(chan struct{}), rem: newRemovals(), settles: newSettles()}
	if h.log == nil {
		h.log = slog.Default()
	}
	if o.timing != nil {
		h.timing = *o.timing
	}
	if o.useVelo {
		h.veloOp = append([]velo.Option{}, o.velo...)
	}
	h.dir = newDirectory(h)
	p, err := buildPlan([]Extension{h.dir}, o.bundles, o.exts, cfg)
	if err != nil {
		return nil, err
	}
	h.plan = p
	if h.st == nil {
		st, err := store.NewInMemoryStore(store.WithTTL(cfg.registrantTTL()))
		if err != nil {
			return nil, err
		}
		h.st = st
	}
	h.auth = newAuthority(h.st)
	h.probe = o.probe
	if h.probe == nil {
		h.probe = h.veloProbe
	}
	return h, nil
}

// undoStack holds the undo of each startup step done so far.
type undoStack []func()

func (u *undoStack) push(f func()) { *u = append(*u, f) }

func (u undoStack) run() {
	for i := len(u) - 1; i >= 0; i-- {
		func() {
			defer func() { _ = recover() }()
			u[i]()
		}()
	}
}

// ErrStarted: Serve was called twice.
var ErrStarted = errors.New("hub: already served")

// Serve starts the hub, in this order: bind both listeners; build the
// hub's velo node with the store as its discovery; write the hub's pinned
// entry; attach each extension, then start each, in dependency order;
// build both routers; install the store's removal hook and reserve each
// entry the store already holds; start the heartbeat, the lifecycle
// goroutine and the HTTP servers. If a step fails or panics, each earlier
// step is undone in reverse order. Serve returns once the hub accepts
// requests; it runs as a task of its own, so a ctx that ends mid-way
// stops the new hub in order instead of leaving it half built.
func (h *Hub) Serve(ctx context.Context) error {
	if h.started {
		return ErrStarted
	}
	h.started = true
	ch := make(chan error, 1)
	go func() { ch <- h.start() }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		go func() {
			if <-ch == nil {
				_ = h.Shutdown(context.Background())
			}
		}()
		return ctx.Err()
	}
}

func (h *Hub) start() (err error) {
	var undo undoStack
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("hub: startup panicked: %v", r)
		}
		if err != nil {
			undo.run()
			h.stopOnce.Do(func() { close(h.stopped) })
		}
	}()
	if err := h.bind(&undo); err != nil {
		return err
	}
	if err := h.startVelo(&undo); err != nil {
		return err
	}
	if err := h.writePinned(&undo); err != nil {
		return err
	}
	if err := h.startExtensions(&undo); err != nil {
		return err
	}
	h.srvPublic = h.newServer(h.routes(false))
	h.srvCtrl = h.newServer(h.routes(true))
	if err := h.reserveExisting(); err != nil {
		return err
	}
	h.loops.Add(2)
	go h.lifecycle()
	go h.watchContinuity()
	if h.node != nil {
		h.loops.Add(1)
		go h.heartbeat()
	}
	h.servers.Add(2)
	go h.serveListener(h.srvPublic, h.lnPublic)
	go h.serveListener(h.srvCtrl, h.lnControl)
	return nil
}

func (h *Hub) bind(undo *undoStack) error {
	var lc net.ListenConfig
	pub, err := lc.Listen(context.Background(), "tcp", h.cfg.PublicAddr)
	if err != nil {
		return fmt.Errorf("hub: public listener: %w", err)
	}
	undo.push(func() { pub.Close() })
	ctl, err := lc.Listen(context.Background(), "tcp", h.cfg.ControlAddr)
	if err != nil {
		return fmt.Errorf("hub: control listener: %w", err)
	}
	undo.push(func() { ctl.Close() })
	h.lnPublic, h.lnControl = pub, ctl
	return nil
}

func (h *Hub) startVelo(undo *undoStack) error {
	if h.veloOp == nil {
		return nil
	}
	opts := append(append([]velo.Option{}, h.veloOp...), velo.WithDiscovery(store.PeerDiscovery(h.st)))
	n, err := velo.New(context.Background(), opts...)
	if err != nil {
		return fmt.Errorf("hub: velo node: %w", err)
	}
	undo.push(func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.shutdownTimeout())
		defer cancel()
		n.Shutdown(ctx)
		h.node = nil
	})
	h.node = n
	h.transports = map[ext.TransportKey]struct{}{}
	for k := range n.PeerInfo().Address {
		h.transports[k] = struct{}{}
	}
	return nil
}

// writePinned writes the hub's own entry: peers find the hub's velo node
// through the store, and the heartbeat never probes it.
func (h *Hub) writePinned(undo *undoStack) error {
	if h.node == nil {
		return nil
	}
	rec := store.Record{Peer: h.node.PeerInfo(), Epoch: h.nextEpoch(), Pinned: true}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.stepTimeout())
	defer cancel()
	op := store.NewOpID()
	inc, err := h.st.Put(ctx, op, rec, 0)
	if errors.Is(err, store.ErrIndeterminate) {
		var ok bool
		var e store.Entry
		e, ok, err = h.st.ResolveWrite(ctx, rec.Peer.InstanceID, op)
		if err == nil && !ok {
			err = errors.New("the write did not apply")
		}
		inc = e.Incarnation
	}
	if err != nil {
		return fmt.Errorf("hub: writing the pinned entry: %w", err)
	}
	h.pinned = &store.Entry{Record: rec, Incarnation: inc}
	undo.push(func() { h.removePinned() })
	return nil
}

func (h *Hub) removePinned() {
	if h.pinned == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.stepTimeout())
	defer cancel()
	_ = h.st.Remove(ctx, h.pinned.Peer.InstanceID, h.pinned.Incarnation)
}

// startExtensions attaches each extension, then starts each, in
// dependency order; the undo shuts down the started ones in reverse.
func (h *Hub) startExtensions(undo *undoStack) error {
	attached := map[string]Extension{}
	for _, e := range h.plan.exts {
		if a, ok := e.(Attacher); ok {
			if err := a.Attach(&AttachContext{hub: h, self: e, attached: attached}); err != nil {
				return fmt.Errorf("hub: attach %s: %w", e.Name(), err)
			}
		}
		attached[e.Name()] = e
	}
	for _, e := range h.plan.exts {
		if s, ok := e.(Starter); ok {
			if err := s.Start(context.Background()); err != nil {
				return fmt.Errorf("hub: start %s: %w", e.Name(), err)
			}
		}
		if st, ok := e.(Stopper); ok {
			undo.push(func() {
				st.StopBackground()
				h.shutdownExtension(e)
			})
		}
	}
	return nil
}

func (h *Hub) shutdownExtension(e Extension) {
	st, ok := e.(Stopper)
	if !ok {
		return
	}
	err := stepDo(context.Background(), h.cfg.shutdownTimeout(), st.Shutdown)
	if err != nil {
		h.log.Warn("hub: extension shutdown", "extension", e.Name(), "err", err)
	}
}

// watchContinuity stops the hub when its store is Fenced: another hub
// holds it.
func (h *Hub) watchContinuity() {
	defer h.loops.Done()
	for {
		c, ch := h.st.ContinuityWatch()
		if c == store.Fenced {
			h.log.Error("hub: the store is fenced by another hub: stopping")
			go h.Shutdown(context.Background())
			return
		}
		if c == store.Closed {
			return
		}
		select {
		case <-ch:
		case <-h.loopsStop:
			return
		}
	}
}
