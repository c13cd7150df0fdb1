package messenger

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
)

// A handler's context.Context (Context.Context).
//
// A request carries no context of its own on the wire; the handler side
// builds one from what it knows: the caller's deadline (DeadlineHeader), a
// cancel the caller sends (_velo_cancel, Go nodes only), the end of the
// connection the request came on, and this node's shutdown. Most handlers
// never ask for it, so nothing is built per request: Context() makes the
// context on first call and registers it in the node's handlerCtxs table,
// and the request's end unregisters it. A request whose handler never calls
// Context() costs one nil check.
//
// A cancel or a connection's end can come before the handler asks for its
// context (the request waits on an ordered lane, or the handler calls
// Context() late). Registration therefore looks back: a connection that is
// gone (the identity gate forgot it) or a cancel that found nothing
// registered and was kept as a tombstone makes the new context done at
// once. Tombstones are bounded (maxTombstones, oldest dropped first): a
// cancel that falls out of the ring before its handler asks for a context
// is lost, and that handler runs on to its deadline, as a handler does
// whose caller never cancels.

// cancelHandler is the Go-defined fire-and-forget message by which a caller
// that gave up tells the handler's node. Its body is the 16-byte response id
// (LE) of the call it ends. See docs/wire.md.
const cancelHandler = "_velo_cancel"

// maxTombstones bounds the cancels kept for handlers that have not asked
// for their context yet.
const maxTombstones = 1024

// ctxKey names one request to a handler context: the connection it came
// on, its caller, and the upper half of its response id (0 for
// fire-and-forget, which cannot be cancelled one by one).
type ctxKey struct {
	conn   ext.ConnID
	caller ext.WorkerID
	token  uint64
}

// handlerCtx is one registered handler context.
type handlerCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stopDL context.CancelFunc // the deadline's; nil without one
	key    ctxKey
}

// handlerCtxs holds the handler contexts of requests that are running.
// Lock order: mu, then the identity gate's mu (connAlive).
type handlerCtxs struct {
	mu      sync.Mutex
	live    map[*handlerCtx]struct{}
	byID    map[ctxKey]*handlerCtx // those with a response id: what a cancel can name
	tombs   map[ctxKey]struct{}
	ring    [maxTombstones]ctxKey // tombs in arrival order, for eviction
	next    int
	stopped bool // shutdown: new contexts are done at once
}

// open builds the context of a request and registers it. A cancel, the
// connection's end or the shutdown that came first makes it done at once.
func (m *Messenger) openHandlerCtx(key ctxKey, dl time.Time) *handlerCtx {
	return m.openHandlerCtxIn(context.Background(), key, dl)
}

// openHandlerCtxIn is openHandlerCtx for a context made from parent (one
// that carries the request's server span: tracing.go).
func (m *Messenger) openHandlerCtxIn(parent context.Context, key ctxKey, dl time.Time) *handlerCtx {
	ctx, cancel := context.WithCancelCause(parent)
	hc := &handlerCtx{ctx: ctx, cancel: cancel, key: key}
	if !dl.IsZero() {
		hc.ctx, hc.stopDL = context.WithDeadline(ctx, dl)
	}
	t := &m.hctx
	t.mu.Lock()
	cause := m.endedBeforeLocked(key)
	if cause == nil {
		if t.live == nil {
			t.live, t.byID = map[*handlerCtx]struct{}{}, map[ctxKey]*handlerCtx{}
		}
		t.live[hc] = struct{}{}
		if key.token != 0 {
			t.byID[key] = hc
		}
	}
	t.mu.Unlock()
	if cause != nil {
		cancel(cause)
	}
	return hc
}

// endedBeforeLocked is why a context being registered is done already,
// or nil.
func (m *Messenger) endedBeforeLocked(key ctxKey) error {
	t := &m.hctx
	switch {
	case t.stopped:
		return ErrShuttingDown
	case key.conn != 0 && !m.connAlive(key.conn):
		return ErrCallerLost
	case key.token != 0 && t.tombs != nil:
		if _, ok := t.tombs[key]; ok {
			delete(t.tombs, key)
			return ErrCallerCancelled
		}
	}
	return nil
}

// connAlive reports whether the inbound connection conn is still open: the
// identity gate keeps every connection that carried a request until the
// transport says it closed.
func (m *Messenger) connAlive(conn ext.ConnID) bool {
	if conn == m.selfConn {
		return true // the loopback's (loopback.go) never closes
	}
	m.gate.mu.Lock()
	defer m.gate.mu.Unlock()
	_, ok := m.gate.conns[conn]
	return ok
}

// closeHandlerCtx unregisters a context whose request ended and cancels it
// (context.Canceled), which also stops its deadline's timer. It may run
// twice for one context.
func (m *Messenger) closeHandlerCtx(hc *handlerCtx) {
	t := &m.hctx
	t.mu.Lock()
	delete(t.live, hc)
	if t.byID[hc.key] == hc {
		delete(t.byID, hc.key)
	}
	t.mu.Unlock()
	hc.cancel(nil)
	if hc.stopDL != nil {
		hc.stopDL()
	}
}

// cancelCall ends the context of the request key names, if it runs; if
// none is registered the cancel is kept as a tombstone, for a handler that
// asks for its context later.
func (m *Messenger) cancelCall(key ctxKey) {
	t := &m.hctx
	t.mu.Lock()
	hc := t.byID[key]
	if hc == nil && !t.stopped {
		t.addTombLocked(key)
	}
	t.mu.Unlock()
	if hc != nil {
		hc.cancel(ErrCallerCancelled)
	}
}

func (t *handlerCtxs) addTombLocked(key ctxKey) {
	if t.tombs == nil {
		t.tombs = make(map[ctxKey]struct{})
	}
	if _, ok := t.tombs[key]; ok {
		return
	}
	if old := t.ring[t.next]; old != (ctxKey{}) {
		delete(t.tombs, old)
	}
	t.ring[t.next] = key
	t.next = (t.next + 1) % maxTombstones
	t.tombs[key] = struct{}{}
}

// cancelWhere ends, with cause, every registered context that match
// accepts. These events (a connection's end, a restart, shutdown) are rare,
// so a scan of what runs now is cheaper than an index kept per request.
func (m *Messenger) cancelWhere(cause error, match func(ctxKey) bool) {
	t := &m.hctx
	var hit []*handlerCtx
	t.mu.Lock()
	for hc := range t.live {
		if match(hc.key) {
			hit = append(hit, hc)
		}
	}
	t.mu.Unlock()
	for _, hc := range hit {
		hc.cancel(cause)
	}
}

// callerConnClosed ends the contexts of the requests that came on conn:
// the caller's calls on that connection fail on its side too.
func (m *Messenger) callerConnClosed(conn ext.ConnID) {
	m.cancelWhere(ErrCallerLost, func(k ctxKey) bool { return k.conn == conn })
}

// callerLost ends the contexts of w's requests. With onlyUnbound, only
// those that came on a transport that names no connection (Conn 0): the
// others end with their connection.
func (m *Messenger) callerLost(w ext.WorkerID, onlyUnbound bool) {
	m.cancelWhere(ErrCallerLost, func(k ctxKey) bool { return k.caller == w && (!onlyUnbound || k.conn == 0) })
}

// stopHandlerCtxs ends every handler context (ErrShuttingDown), and the
// ones asked for from now on: the drain is over.
func (m *Messenger) stopHandlerCtxs() {
	m.hctx.mu.Lock()
	m.hctx.stopped = true
	m.hctx.mu.Unlock()
	m.cancelWhere(ErrShuttingDown, func(ctxKey) bool { return true })
}

// onCancel handles a _velo_cancel. It honours only a cancel that names a
// call of its own sender (the worker the connection is bound to) and came
// on the connection the request came on: any other names nothing here.
func (m *Messenger) onCancel(c *Context) {
	if len(c.Payload) != 16 {
		m.countFailure("cancel", "malformed")
		return
	}
	id := msgwire.ReadResponseID(c.Payload)
	if id.Lo != uint64(c.sender) || id.Hi == 0 {
		m.countFailure("cancel", "foreign_id")
		return
	}
	m.cancelCall(ctxKey{conn: c.conn, caller: c.sender, token: id.Hi})
}

// sendCancel tells a Go peer that the caller gave up on call id. A Rust
// peer has no such handler and is never sent one. It never waits.
func (m *Messenger) sendCancel(p *peer, target ext.InstanceID, id msgwire.ResponseID) {
	if !p.proves {
		return
	}
	if err := m.post(target, cancelHandler, id.AppendLE(make([]byte, 0, 16))); err != nil {
		m.logger().Debug("velo: cancel not sent", "peer", target, "err", err)
	}
}

// shouldCancel reports whether a call whose ctx ended should tell the
// handler's node: a cancel always, a deadline only when the request did
// not carry it (the handler's own deadline ends its context then).
func shouldCancel(ctx context.Context, budgeted bool) bool {
	err := ctx.Err()
	return err != nil && !(budgeted && errors.Is(err, context.DeadlineExceeded))
}

// Context is the handler's context.Context, as Request.Context is an HTTP
// handler's. It is done at the first of these, and context.Cause says
// which:
//
//   - the caller's deadline passes (context.DeadlineExceeded). The
//     deadline travels with the request, so Deadline reports the caller's
//     (less the transit, where the two hosts' clocks agree);
//   - the caller cancels its call (ErrCallerCancelled; Go callers send
//     the cancel, Rust callers do not);
//   - the connection the request came on ends, as when the caller's
//     process dies, or its caller is found restarted (ErrCallerLost);
//   - this node's Shutdown passes its drain budget (ErrShuttingDown);
//   - the handler returns (context.Canceled), as for an HTTP handler: work
//     that outlives the handler needs a context of its own.
//
// It is made on first call, so a handler that never calls it pays nothing
// for it; later calls return the same context. It is safe to call from
// any goroutine. A fire-and-forget handler's context ends the same ways,
// less the cancel. An inline handler (WithInline) learns of a cancel or
// of its connection's end only after it returns, since the goroutine that
// would read them runs it; its deadline and the shutdown still end it. A
// spawn handler that runs on the goroutine that read its request has that
// goroutine hand the connection on to another when it first asks, so it
// hears of them, and of answers coming on that connection, at once.
func (c *Context) Context() context.Context {
	if hc := c.hc.Load(); hc != nil {
		return hc.ctx
	}
	hc := c.m.openHandlerCtx(ctxKey{conn: c.conn, caller: c.sender, token: c.token}, c.dl)
	if !c.hc.CompareAndSwap(nil, hc) {
		c.m.closeHandlerCtx(hc) // another goroutine made it first
		return c.hc.Load().ctx
	}
	if c.ended.Load() {
		// Asked for after the handler returned (from a goroutine it
		// left behind): finishRun may have looked before the store.
		c.m.closeHandlerCtx(hc)
	} else if c.inline {
		// A handler that asks for its context is about to wait on
		// something (a call, most often, whose answer may come on the
		// very connection its reader holds), or to hear of a cancel or
		// of its connection's end, which only reading that connection
		// brings: the reader hands it on now, not when the transport's
		// timer finds the run long (which is late in an idle process:
		// a millisecond or more).
		c.m.handOnReader(c.Handler)
	}
	return hc.ctx
}

// finishRun ends the handler context of a request whose handler returned.
func (c *Context) finishRun() {
	c.ended.Store(true)
	if hc := c.hc.Load(); hc != nil {
		c.m.closeHandlerCtx(hc)
	}
}

// pastDeadline reports whether the handler's error is its context's
// deadline: the caller's deadline passed.
func (c *Context) pastDeadline(err error) bool {
	return !c.dl.IsZero() && !time.Now().Before(c.dl) && errors.Is(err, context.DeadlineExceeded)
}

// handOnReader hands on the connection held by the reader that runs a
// request to the named handler on itself (spawnPool.tryInline).
func (m *Messenger) handOnReader(name string) {
	if r := (*m.handlers.Load())[name]; r != nil {
		r.pool.handOnReader()
	}
}

// callStarts is what a call that waits for an answer (Unary, Sync, an
// async call) does first: while a request runs on a reader, the answer may
// come on the connection that reader holds (handOnReaders). One atomic
// load otherwise.
func (m *Messenger) callStarts() {
	if m.onReaders.Load() != 0 {
		m.handOnReaders()
	}
}

// handOnReaders hands on the connections of every reader that runs a
// request on itself. A call waits for an answer, which may come on the
// very connection such a reader holds (a handler that calls back its own
// caller, with or without its Context's context): it is read at once, not
// when the transport's timer finds the run long, which is a millisecond
// or more late in an idle process. The call cannot tell which run, if
// any, is its own handler's, so it hands on all of them: the followers
// they wake would have been woken before every such run anyway.
func (m *Messenger) handOnReaders() {
	for _, r := range *m.handlers.Load() {
		r.pool.handOnReader()
	}
}
