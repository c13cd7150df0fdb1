// Package velo is the facade of the velo messaging library: build a Node
// with transports, register handlers, register peers and call them.
//
//	node, err := velo.New(ctx, velo.WithTransport(tr))
//	node.Register(velo.UnaryHandler("ping", func(c *velo.Context) ([]byte, error) { return []byte("pong"), nil }))
//	node.RegisterPeer(other.PeerInfo())
//	resp, err := node.Unary(ctx, other.InstanceID(), "ping", nil)
//
// Every call that can wait takes a context; its deadline is the call's
// timeout (ErrRequestTimeout, which also matches context.DeadlineExceeded).
// A Node is a pointer: copies share one instance. Call Shutdown to drain
// and stop it.
package velo

import (
	"context"
	"log/slog"

	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
)

// Node is one velo instance. Its messaging methods are the messenger's;
// Events is its distributed event manager.
type Node struct {
	*messenger.Messenger
	Events *events.Manager
}

// Option configures New.
type Option func(*messenger.Config)

// WithTransport adds a transport (TCP, UDS, ...). At least one is needed.
func WithTransport(t ext.Transport) Option {
	return func(c *messenger.Config) { c.Transports = append(c.Transports, t) }
}

// WithDiscovery finds peers that were not registered by hand.
func WithDiscovery(d ext.PeerDiscovery) Option {
	return func(c *messenger.Config) { c.Discovery = d }
}

// WithMetrics records into a VeloMetrics registered by the caller.
func WithMetrics(m *metrics.VeloMetrics) Option {
	return func(c *messenger.Config) { c.Metrics = m }
}

// WithUndeliveredHandler installs fn to hear of every message a transport
// admitted and then failed or discarded (see messenger.Config.OnUndelivered).
func WithUndeliveredHandler(fn func(peer ext.InstanceID, handler string, err error)) Option {
	return func(c *messenger.Config) { c.OnUndelivered = fn }
}

// WithResponseSlots bounds the calls waiting for an answer at once (default
// and most 65536: a response id names its slot in 16 bits).
func WithResponseSlots(n int) Option {
	return func(c *messenger.Config) { c.ResponseSlots = n }
}

// WithMaxRunningHandlers caps the handlers the node runs at once (default
// 10,000, messenger.DefaultMaxRunningHandlers). A request that arrives at
// the cap is answered at once with ErrOverloaded.
func WithMaxRunningHandlers(n int) Option {
	return func(c *messenger.Config) { c.MaxRunningHandlers = n }
}

// WithLogger sends the node's warnings to l instead of slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *messenger.Config) { c.Logger = l }
}

// New starts a node.
func New(ctx context.Context, opts ...Option) (*Node, error) {
	var cfg messenger.Config
	for _, o := range opts {
		o(&cfg)
	}
	m, err := messenger.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ev, err := events.NewDistributed(m)
	if err != nil {
		m.Shutdown(messenger.Timeout(0))
		return nil, err
	}
	return &Node{Messenger: m, Events: ev}, nil
}

// Shutdown drains and stops the node (see messenger.Messenger.Shutdown),
// then fails the remote event waits still pending.
func (n *Node) Shutdown(p ShutdownPolicy) error {
	err := n.Messenger.Shutdown(p)
	n.Events.Close()
	return err
}

// Names from the messenger, so most programs import only velo.
type (
	Context        = messenger.Context
	Handler        = messenger.Handler
	HandlerOption  = messenger.HandlerOption
	CallOption     = messenger.CallOption
	RemoteError    = messenger.RemoteError
	OrderedConfig  = messenger.OrderedConfig
	OverflowPolicy = messenger.OverflowPolicy
	ShutdownPolicy = messenger.ShutdownPolicy
)

var (
	UnaryHandler         = messenger.UnaryHandler
	SyncHandler          = messenger.SyncHandler
	FireHandler          = messenger.FireHandler
	WithOrdered          = messenger.WithOrdered
	WithOrderedGlobal    = messenger.WithOrderedGlobal
	WithOrderedConfig    = messenger.WithOrderedConfig
	WithMaxConcurrent    = messenger.WithMaxConcurrent
	WithInline           = messenger.WithInline
	WithDrainExempt      = messenger.WithDrainExempt
	WithHeaders          = messenger.WithHeaders
	WaitForever          = messenger.WaitForever
	Timeout              = messenger.Timeout
	ErrRequestTimeout    = messenger.ErrRequestTimeout
	ErrShuttingDown      = messenger.ErrShuttingDown
	ErrPeerNotRegistered = messenger.ErrPeerNotRegistered
	ErrReservedName      = messenger.ErrReservedName
	ErrDuplicateHandler  = messenger.ErrDuplicateHandler
	ErrLaneFull          = messenger.ErrLaneFull
	ErrNoResponseSlot    = messenger.ErrNoResponseSlot
	ErrUnknownHandler    = messenger.ErrUnknownHandler
	ErrOverloaded        = messenger.ErrOverloaded
	ErrPeerUnreachable   = messenger.ErrPeerUnreachable
	ErrPeerRestarted     = messenger.ErrPeerRestarted
)

// Header limits: a value of at most MaxHeaderValue bytes, all headers of a
// call at most MaxEncodedHeaders bytes encoded.
const (
	MaxHeaderValue    = messenger.MaxHeaderValue
	MaxEncodedHeaders = messenger.MaxEncodedHeaders
)

// Overflow policies for ordered lanes.
const (
	Warn   = messenger.Warn
	Reject = messenger.Reject
)

// TypedUnaryHandler decodes JSON requests into In and encodes Out as JSON.
func TypedUnaryHandler[In, Out any](name string, fn func(*Context, In) (Out, error), opts ...HandlerOption) Handler {
	return messenger.TypedUnaryHandler(name, fn, opts...)
}

// TypedUnary calls a typed handler: req goes as JSON, the answer is decoded into Resp.
func TypedUnary[Resp any](ctx context.Context, n *Node, target ext.InstanceID, handler string, req any, opts ...CallOption) (Resp, error) {
	return messenger.TypedUnary[Resp](ctx, n.Messenger, target, handler, req, opts...)
}

// TypedUnaryAsync is TypedUnary with a callback instead of a waiting
// goroutine; see Messenger.UnaryAsync for when and where done runs.
func TypedUnaryAsync[Resp any](ctx context.Context, n *Node, target ext.InstanceID, handler string, req any, done func(Resp, error), opts ...CallOption) error {
	return messenger.TypedUnaryAsync(ctx, n.Messenger, target, handler, req, done, opts...)
}
