package messenger

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/internal/msgwire"
)

// Context is what a handler gets: the request, its context.Context
// (Context), and the messenger, so the handler can send messages of its own.
// A *Context is valid until the handler returns.
type Context struct {
	// Payload is valid until the handler returns; copy what you keep. That
	// includes a Payload handed to something that holds it by reference
	// after the handler returns (a goroutine, streaming's SendFrame): a
	// large staged payload's memory is reused by a later fetch. Staging it
	// again with velo (Send, Unary, RegisterData) is safe.
	Payload []byte
	// Handler is the name the request was sent to.
	Handler string

	m       *Messenger
	headers []byte
	sender  ext.WorkerID
	conn    ext.ConnID // the connection the request came on (identity.go)
	token   uint64     // the upper half of the response id: what a cancel names
	dl      time.Time  // the caller's deadline here, zero without one (budget.go)
	lent    *hook.Loan // what the answer lives in, when lendAnswer said so

	// The handler's context.Context, made on first use (handlerctx.go);
	// ended is set once the handler returned.
	hc    atomic.Pointer[handlerCtx]
	ended atomic.Bool
	// rtype sits by ended, so that the two share a word: each request's
	// Context is a heap object of 144 bytes, a size class.
	rtype msgwire.ResponseType
	// inline: the request runs on the goroutine that read it, which
	// holds its connection (spawnPool.tryInline); in the same word.
	inline bool
}

// Messenger is the node's messenger, for sending from inside a handler.
func (c *Context) Messenger() *Messenger { return c.m }

// SenderWorkerID is always known: it travels in every request.
func (c *Context) SenderWorkerID() ext.WorkerID { return c.sender }

// SenderInstanceID is known once the sender's handshake is done.
func (c *Context) SenderInstanceID() (ext.InstanceID, bool) { return c.m.peers.byWorker(c.sender) }

// Headers decodes the request's headers. The caller's deadline travels in
// one of them (_velo_deadline); it is left out here: Context has it.
func (c *Context) Headers() (map[string]string, error) {
	h, err := msgwire.DecodeHeaders(c.headers)
	delete(h, msgwire.DeadlineHeader)
	return h, err
}

// ResponseType says what the caller waits for.
func (c *Context) responseType() msgwire.ResponseType { return c.rtype }

// lendAnswer says that the answer the handler is about to return lives in
// memory that l guards, and that the handler took one reference on l for
// it. The messenger hands the answer to the transport with l as its Owner
// (a transport that does not retain owners gets a copy instead) and then
// drops that reference, or drops it at once when no answer goes out. The
// lender learns so when the answer's bytes are no longer read by anyone.
// The answer must not live in the request's payload: l replaces the
// request's buffer as the answer's owner. Rendezvous serves the pulls of
// a lent payload this way (hook.Lender).
func (c *Context) lendAnswer(l *hook.Loan) { c.lent = l }

type handlerKind uint8

const (
	kindUnary handlerKind = iota
	kindSync
	kindFire
)

// Handler is a registered function with its dispatch options. Build one
// with UnaryHandler, SyncHandler, FireHandler or TypedUnaryHandler.
type Handler struct {
	name  string
	kind  handlerKind
	fn    func(*Context) ([]byte, error)
	opts  handlerOptions
	err   error // an option that did not validate
	typed bool
}

// Name of the handler.
func (h Handler) Name() string { return h.name }

// UnaryHandler answers each request with bytes or an error.
func UnaryHandler(name string, fn func(*Context) ([]byte, error), opts ...HandlerOption) Handler {
	return newHandler(name, kindUnary, fn, opts)
}

// SyncHandler acknowledges each request once it has run, or returns its error (a nack).
func SyncHandler(name string, fn func(*Context) error, opts ...HandlerOption) Handler {
	return newHandler(name, kindSync, func(c *Context) ([]byte, error) { return nil, fn(c) }, opts)
}

// FireHandler runs for fire-and-forget messages; nothing goes back.
func FireHandler(name string, fn func(*Context), opts ...HandlerOption) Handler {
	return newHandler(name, kindFire, func(c *Context) ([]byte, error) { fn(c); return nil, nil }, opts)
}

// TypedUnaryHandler decodes the request from JSON and encodes the answer as JSON.
func TypedUnaryHandler[In, Out any](name string, fn func(*Context, In) (Out, error), opts ...HandlerOption) Handler {
	h := newHandler(name, kindUnary, func(c *Context) ([]byte, error) {
		var in In
		if err := json.Unmarshal(c.Payload, &in); err != nil {
			return nil, fmt.Errorf("decode request: %w", err)
		}
		out, err := fn(c, in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}, opts)
	h.typed = true
	return h
}

func newHandler(name string, kind handlerKind, fn func(*Context) ([]byte, error), opts []HandlerOption) Handler {
	h := Handler{name: name, kind: kind, fn: fn}
	h.opts.idleTTL = 30 * time.Second
	for _, o := range opts {
		if err := o(&h.opts); err != nil && h.err == nil {
			h.err = err
		}
	}
	if h.opts.mode == modeInline && h.err == nil {
		switch {
		case h.opts.maxConcurrent > 0:
			h.err = fmt.Errorf("inline dispatch cannot wait for a MaxConcurrent permit")
		case h.opts.maxDepth > 0:
			h.err = fmt.Errorf("inline dispatch has no lanes: a queue depth does not apply")
		}
	}
	return h
}

// dispatchMode picks how a handler's requests run.
type dispatchMode uint8

// Dispatch modes.
const (
	// modeSpawn runs requests concurrently (the default): a request never
	// waits for another one's handler to return. Workers are reused, so a
	// burst of short requests does not start a goroutine per request.
	modeSpawn dispatchMode = iota
	// modeOrdered keeps one lane per sending instance: a sender's requests run
	// in arrival order, different senders in parallel.
	modeOrdered
	// modeOrderedGlobal keeps one lane for everyone: total order.
	modeOrderedGlobal
	// modeInline runs the request on the goroutine of the connection that
	// delivered it. See WithInline.
	modeInline
)

// OverflowPolicy says what an ordered lane does with a message that
// arrives while MaxQueueDepth messages already wait on it. Neither policy
// makes the connection's reader wait: that reader also carries the replies
// to the calls the node's handlers make, so waiting there could deadlock a
// handler that calls back its sender, and under WithOrderedGlobal one slow
// handler would stall every peer.
type OverflowPolicy uint8

// Overflow policies.
const (
	// Warn queues the message anyway (the queue has no hard bound), counts
	// it in velo_messenger_ordered_lane_over_depth_total and logs a warning
	// (at most one line per handler every 10 s). The default.
	Warn OverflowPolicy = iota
	// Reject refuses the message: the caller gets ErrLaneFull (counted as
	// ordered_lane_shed); a fire-and-forget message is dropped.
	Reject
)

// OrderedConfig configures ordered dispatch.
type OrderedConfig struct {
	// Global: one lane for all senders instead of one per sender.
	Global bool
	// IdleLaneTTL stops a lane idle this long (default 30 s). Negative
	// keeps lanes for ever.
	IdleLaneTTL time.Duration
	// MaxQueueDepth is a soft per-lane limit that drives Overflow; 0 means
	// none. A lane's depth counts the messages waiting on it, not the one
	// its handler is running.
	MaxQueueDepth int
	Overflow      OverflowPolicy
}

type handlerOptions struct {
	mode          dispatchMode
	idleTTL       time.Duration // < 0: never
	maxDepth      int
	overflow      OverflowPolicy
	maxConcurrent int
	drainExempt   bool
	// stagedFailure, when set, hears of a staged request that could not be
	// fetched (WithStagedFailure).
	stagedFailure func(sender ext.WorkerID, headers map[string]string, err error)
}

// HandlerOption sets a dispatch option on a handler.
type HandlerOption func(*handlerOptions) error

// withStagedFailure calls fn when a request for this handler arrived
// staged and its payload could not be fetched (refused for its size,
// timed out, gone): the handler does not run, and fn gets the sender's
// worker, the request's headers (without the staging keys) and the error.
// A fire-and-forget request has no reply to carry the failure, so this is
// how its handler's owner learns of it (the mux ends the one stream the
// headers name). fn runs on a goroutine of its own and must not block
// long.
func withStagedFailure(fn func(sender ext.WorkerID, headers map[string]string, err error)) HandlerOption {
	return func(o *handlerOptions) error { o.stagedFailure = fn; return nil }
}

// WithOrdered dispatches in arrival order per sending instance.
func WithOrdered() HandlerOption {
	return func(o *handlerOptions) error { o.mode = modeOrdered; return nil }
}

// WithInline runs each request on the goroutine that read it off the
// connection, with no hand-off to another goroutine. On a small machine a
// hand-off wakes an idle CPU and costs more than a short handler (see
// docs/benchmarks.md), so this is for handlers that answer in microseconds
// from memory. It saves the most with callers that use UnaryAsync: a
// waiting Unary caller is still woken by a hand-off on its own node.
//
// The handler must not block and must never wait for a reply (Unary, Sync,
// an event): while it runs, its connection reads nothing else, and a reply
// that arrives on that connection would wait behind it. Requests from one
// connection run one at a time, in arrival order. Not allowed with
// WithMaxConcurrent, whose wait would stall the connection.
func WithInline() HandlerOption {
	return func(o *handlerOptions) error { o.mode = modeInline; return nil }
}

// WithOrderedGlobal dispatches in one total order.
func WithOrderedGlobal() HandlerOption {
	return func(o *handlerOptions) error { o.mode = modeOrderedGlobal; return nil }
}

// WithOrderedConfig dispatches in order with explicit settings.
func WithOrderedConfig(c OrderedConfig) HandlerOption {
	return func(o *handlerOptions) error {
		if c.MaxQueueDepth < 0 {
			return fmt.Errorf("velo: negative max queue depth")
		}
		o.mode = modeOrdered
		if c.Global {
			o.mode = modeOrderedGlobal
		}
		if c.IdleLaneTTL != 0 {
			o.idleTTL = c.IdleLaneTTL
		}
		if c.Overflow > Reject {
			return fmt.Errorf("velo: unknown overflow policy %d", c.Overflow)
		}
		o.maxDepth, o.overflow = c.MaxQueueDepth, c.Overflow
		return nil
	}
}

// WithMaxConcurrent bounds how many requests of this handler run at once,
// across lanes, without changing the order inside a lane. It bounds
// goroutines too: in spawn mode the requests over the limit wait in the
// handler's queue, not on goroutines of their own, and each worker that
// finishes takes the next one. While n run, that queue is not held to
// Config.SpawnQueueRequests: the reader that fills it may carry the
// answers those n wait for. 0 is refused.
func WithMaxConcurrent(n int) HandlerOption {
	return func(o *handlerOptions) error {
		if n <= 0 {
			return fmt.Errorf("velo: max concurrent must be at least 1, got %d", n)
		}
		o.maxConcurrent = n
		return nil
	}
}

// WithDrainExempt lets the handler's requests through during a drain: for
// handlers that serve work already accepted, never for ones that start new work.
func WithDrainExempt() HandlerOption {
	return func(o *handlerOptions) error { o.drainExempt = true; return nil }
}

func validName(name string, system bool) error {
	if name == "" || len(name) > maxHandlerName {
		return fmt.Errorf("velo: handler name must be 1..%d bytes", maxHandlerName)
	}
	if strings.HasPrefix(name, "_") && !system {
		return fmt.Errorf("%w: %q", ErrReservedName, name)
	}
	return nil
}
