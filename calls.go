package velo

import (
	"context"
	"errors"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
)

// Every call takes an ext.Target: an instance id, or Service(name) for
// any live instance of a service (see WithServiceDiscovery).

// Send is fire-and-forget: it returns once a transport took the message.
// A message the transport later fails to deliver is counted (Undelivered)
// and reported to WithUndeliveredHandler.
func (n *Node) Send(ctx context.Context, target ext.Target, handler string, payload []byte, opts ...CallOption) error {
	if id, ok := target.(ext.InstanceID); ok {
		// An instance needs no resolution, and its finish does nothing:
		// spared per message of a stream of sends.
		return n.m.Send(ctx, id, handler, payload, opts...)
	}
	id, finish, err := n.resolve(ctx, target)
	if err != nil {
		return err
	}
	err = n.m.Send(ctx, id, handler, payload, opts...)
	finish(err)
	return err
}

// Sync waits until the remote handler has run; its error comes back as a
// *RemoteError. A payload above the staging threshold is staged without a
// copy, as Unary's is.
func (n *Node) Sync(ctx context.Context, target ext.Target, handler string, payload []byte, opts ...CallOption) error {
	id, finish, err := n.resolve(ctx, target)
	if err != nil {
		return err
	}
	err = n.m.Sync(ctx, id, handler, payload, opts...)
	finish(err)
	return err
}

// Unary returns the remote handler's answer. The deadline of ctx bounds
// the whole call, but for one wait: a payload above the staging threshold
// is staged without a copy, so before Unary returns, however it ends, the
// transport finishes writing the chunks it already served from it (at
// most four, 512 KiB each; see docs/rendezvous.md).
func (n *Node) Unary(ctx context.Context, target ext.Target, handler string, payload []byte, opts ...CallOption) ([]byte, error) {
	id, finish, err := n.resolve(ctx, target)
	if err != nil {
		return nil, err
	}
	resp, err := n.m.Unary(ctx, id, handler, payload, opts...)
	finish(err)
	return resp, err
}

// UnaryAsync is Unary with a callback instead of a waiting goroutine; see
// messenger.Messenger.UnaryAsync for when and where done runs. A service
// target is resolved before UnaryAsync returns.
func (n *Node) UnaryAsync(ctx context.Context, target ext.Target, handler string, payload []byte, done func(resp []byte, err error), opts ...CallOption) error {
	if id, ok := target.(ext.InstanceID); ok {
		// No wrapper: a callback made per call would cost an allocation.
		return n.m.UnaryAsync(ctx, id, handler, payload, done, opts...)
	}
	id, finish, err := n.resolve(ctx, target)
	if err != nil {
		return err
	}
	err = n.m.UnaryAsync(ctx, id, handler, payload, func(resp []byte, err error) {
		finish(err)
		if done != nil {
			done(resp, err)
		}
	}, opts...)
	if err != nil {
		finish(err)
	}
	return err
}

// RemoteHandlers lists the user handlers of a peer (for a service, of the
// instance picked), asking it.
func (n *Node) RemoteHandlers(ctx context.Context, target ext.Target) ([]string, error) {
	id, finish, err := n.resolve(ctx, target)
	if err != nil {
		return nil, err
	}
	hs, err := n.m.RemoteHandlers(ctx, id)
	finish(err)
	return hs, err
}

// WaitForHandler returns once target serves handler, or ctx ends. For a
// service it first waits for an instance to be registered, then for the
// instance picked to serve handler.
func (n *Node) WaitForHandler(ctx context.Context, target ext.Target, handler string) error {
	id, finish, err := n.resolve(ctx, target)
	for errors.Is(err, ErrNoInstance) {
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(serviceWaitPoll):
		}
		id, finish, err = n.resolve(ctx, target)
	}
	if err != nil {
		return err
	}
	err = n.m.WaitForHandler(ctx, id, handler)
	finish(err)
	return err
}

// serviceWaitPoll is how often WaitForHandler asks again for a service
// with no instance yet.
const serviceWaitPoll = 50 * time.Millisecond

// TypedUnary calls a typed handler: req goes as JSON, the answer is
// decoded into Resp. Req is inferred: velo.TypedUnary[Answer](ctx, n, ...).
// target is an instance id or Service(name).
func TypedUnary[Resp, Req any](ctx context.Context, n *Node, target ext.Target, handler string, req Req, opts ...CallOption) (Resp, error) {
	id, finish, err := n.resolve(ctx, target)
	if err != nil {
		var zero Resp
		return zero, err
	}
	resp, err := messenger.TypedUnary[Resp](ctx, n.m, id, handler, req, opts...)
	finish(err)
	return resp, err
}

// TypedUnaryAsync is TypedUnary with a callback instead of a waiting
// goroutine; see messenger.Messenger.UnaryAsync for when and where done runs.
func TypedUnaryAsync[Resp, Req any](ctx context.Context, n *Node, target ext.Target, handler string, req Req, done func(Resp, error), opts ...CallOption) error {
	if id, ok := target.(ext.InstanceID); ok {
		return messenger.TypedUnaryAsync(ctx, n.m, id, handler, req, done, opts...)
	}
	id, finish, err := n.resolve(ctx, target)
	if err != nil {
		return err
	}
	if done == nil { // the messenger refuses it; say so without a pick counted
		finish(nil)
		return messenger.TypedUnaryAsync(ctx, n.m, id, handler, req, done, opts...)
	}
	err = messenger.TypedUnaryAsync(ctx, n.m, id, handler, req, func(r Resp, err error) {
		finish(err)
		done(r, err)
	}, opts...)
	if err != nil {
		finish(err)
	}
	return err
}
