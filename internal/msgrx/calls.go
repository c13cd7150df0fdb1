package msgrx

import (
	"context"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/messenger"
)

var (
	fireAndAwait   = typed[func(*messenger.Messenger, context.Context, ext.InstanceID, string, func(msgwire.ResponseID) []byte, ...messenger.CallOption) ([]byte, error)]("FireAndAwait", hook.Fns.FireAndAwait)
	unaryAsyncView = typed[func(*messenger.Messenger, context.Context, ext.InstanceID, string, []byte, func(int) []byte, func([]byte, error)) error]("UnaryAsyncView", hook.Fns.UnaryAsyncView)
	unaryAsyncCall = typed[func(*messenger.Messenger, context.Context, ext.InstanceID, string, []byte, func([]byte, error), ...messenger.CallOption) (uint64, error)]("UnaryAsyncCall", hook.Fns.UnaryAsyncCall)
	abandon        = typed[func(*messenger.Messenger, uint64, error) bool]("Abandon", hook.Fns.Abandon)
	handshake      = typed[func(*messenger.Messenger, context.Context, ext.InstanceID) error]("Handshake", hook.Fns.Handshake)
	acknowledge    = typed[func(*messenger.Messenger, msgwire.ResponseID, error) error]("Acknowledge", hook.Fns.Acknowledge)
)

// FireAndAwait sends a fire-and-forget request whose body names a response
// slot, and waits for the Ack or Response sent to that slot. build gets
// the slot's id and returns the payload. This is how a protocol whose
// request is fire-and-forget but whose answer is awaited (the reference's
// event trigger requests) is spoken; ctx bounds the wait. Like Post it
// skips the handshake and takes only system handler names.
func FireAndAwait(m *messenger.Messenger, ctx context.Context, target ext.InstanceID, handler string, build func(msgwire.ResponseID) []byte, opts ...messenger.CallOption) ([]byte, error) {
	return fireAndAwait(m, ctx, target, handler, build, opts...)
}

// UnaryAsyncView is UnaryAsync for a system handler ('_' name) on a
// registered peer, whose callback reads a successful answer where the
// transport received it: resp is valid only until done returns, and done
// runs on the transport's reader, so it copies what it keeps and returns
// quickly. It saves one copy of every answer (rendezvous pulls).
//
// into, when not nil, may give a slice of n bytes for a large answer of n
// bytes, which the transport then reads straight from the socket into it
// (resp is then that slice): one copy fewer again. It runs on a
// transport's reader with the call's lock held, so it is quick and calls
// nothing of the messenger's; nil takes the answer the usual way. Until
// done runs the slice may still be written, whatever ends the call.
func UnaryAsyncView(m *messenger.Messenger, ctx context.Context, target ext.InstanceID, handler string, payload []byte, into func(n int) []byte, done func(resp []byte, err error)) error {
	return unaryAsyncView(m, ctx, target, handler, payload, into, done)
}

// AsyncCall names an asynchronous call in flight (UnaryAsyncCall), so that
// its caller can give up on it without a context: a context that can end
// costs a watch per call. The zero value names no call.
type AsyncCall struct {
	m     *messenger.Messenger
	token uint64
}

// UnaryAsyncCall is m.UnaryAsync, and names the call so that the caller
// may Abandon it. A first call to a peer, which waits for the handshake on
// a goroutine of its own, cannot be named: it returns the zero AsyncCall.
func UnaryAsyncCall(m *messenger.Messenger, ctx context.Context, target ext.InstanceID, handler string, payload []byte, done func(resp []byte, err error), opts ...messenger.CallOption) (AsyncCall, error) {
	token, err := unaryAsyncCall(m, ctx, target, handler, payload, done, opts...)
	if token == 0 {
		return AsyncCall{}, err
	}
	return AsyncCall{m: m, token: token}, err
}

// Abandon completes the call with err, as if err had been its answer: its
// response slot is free again and its callback runs now, with err. An
// answer that comes later is discarded. It reports false when the call had
// completed already, or c names none.
func (c AsyncCall) Abandon(err error) bool {
	if c.m == nil {
		return false
	}
	return abandon(c.m, c.token, err)
}

// Token is the number that names c to AbandonToken; 0 names no call. A
// holder that must not import messenger keeps the token instead of c.
func (c AsyncCall) Token() uint64 { return c.token }

// AbandonToken is Abandon for the call of m that token names.
func AbandonToken(m *messenger.Messenger, token uint64, err error) bool {
	if token == 0 {
		return false
	}
	return AsyncCall{m: m, token: token}.Abandon(err)
}

// Handshake runs the _hello exchange with target unless it already ran, so
// that target knows this node's address. A subsystem that sends only '_'
// messages (which skip the handshake) calls it before asking target to
// answer back.
func Handshake(m *messenger.Messenger, ctx context.Context, target ext.InstanceID) error {
	return handshake(m, ctx, target)
}

// Acknowledge answers the request named by id from outside its handler: an
// Ack when err is nil; a failure with a code (a velo.Error) goes as an
// error Response whose headers carry the code and reason, one without as a
// Nack with err's text. It is how an event trigger request is answered.
func Acknowledge(m *messenger.Messenger, id msgwire.ResponseID, err error) error {
	return acknowledge(m, id, err)
}
