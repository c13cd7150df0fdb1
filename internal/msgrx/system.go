package msgrx

import (
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/messenger"
)

var (
	registerSystem    = typed[func(*messenger.Messenger, messenger.Handler) error]("RegisterSystem", hook.Fns.RegisterSystem)
	onPeerLost        = typed[func(*messenger.Messenger, func(ext.InstanceID, error))]("OnPeerLost", hook.Fns.OnPeerLost)
	watchUndelivered  = typed[func(*messenger.Messenger, string, func([]byte, error))]("WatchUndelivered", hook.Fns.WatchUndelivered)
	onTeardown        = typed[func(*messenger.Messenger, func())]("OnTeardown", hook.Fns.OnTeardown)
	stopped           = typed[func(*messenger.Messenger) <-chan struct{}]("Stopped", hook.Fns.Stopped)
	setStager         = typed[func(*messenger.Messenger, hook.Stager)]("SetStager", hook.Fns.SetStager)
	stagingThreshold  = typed[func(*messenger.Messenger) int]("StagingThreshold", hook.Fns.StagingThreshold)
	withStagedFailure = typed[func(func(ext.WorkerID, map[string]string, error)) messenger.HandlerOption]("WithStagedFailure", hook.Fns.WithStagedFailure)
	withOp            = typed[func(string) messenger.CallOption]("WithOp", hook.Fns.WithOp)
	responseTypeOf    = typed[func(*messenger.Context) msgwire.ResponseType]("ResponseTypeOf", hook.Fns.ResponseTypeOf)
	lendAnswer        = typed[func(*messenger.Context, *hook.Loan)]("LendAnswer", hook.Fns.LendAnswer)
)

// LendAnswer says that the answer the handler c serves is about to return
// lives in memory that l guards, and that the handler took one reference
// on l for it: the transport holds l while it holds the answer's bytes,
// and the messenger drops the handler's reference once the answer is
// handed over (at once, when none goes out), so l's last Release says
// that nothing reads those bytes any more. A transport that does not
// retain owners gets a copy. The answer must not live in c.Payload.
func LendAnswer(c *messenger.Context, l *Loan) { lendAnswer(c, l) }

// RegisterSystem adds a handler whose name starts with '_': velo's own
// subsystems' handlers (events, streams), never an application's.
func RegisterSystem(m *messenger.Messenger, h messenger.Handler) error { return registerSystem(m, h) }

// OnPeerLost registers fn to hear when a transport lost its connection to
// a peer (err matches velo.ErrPeerUnreachable). fn runs on the transport's
// goroutine and must not block.
func OnPeerLost(m *messenger.Messenger, fn func(peer ext.InstanceID, err error)) { onPeerLost(m, fn) }

// WatchUndelivered registers fn to hear of fire-and-forget messages to
// handler that a transport admitted but could not write (Send had already
// returned nil). fn gets a copy of the payload, on a goroutine of its own.
// A subsystem whose protocol is fire-and-forget (event subscriptions) uses
// it to fail what waits on such a message at once, not at its deadline.
func WatchUndelivered(m *messenger.Messenger, handler string, fn func(payload []byte, err error)) {
	watchUndelivered(m, handler, fn)
}

// OnTeardown registers fn to run once, when Shutdown has drained and
// before it stops the transports. fn may send; it must return once the
// transports are down.
func OnTeardown(m *messenger.Messenger, fn func()) { onTeardown(m, fn) }

// Stopped is closed once teardown begins: subsystems fail their waits then.
func Stopped(m *messenger.Messenger) <-chan struct{} { return stopped(m) }

// SetStager installs transparent staging (nil removes it). Call it before
// the node takes traffic.
func SetStager(m *messenger.Messenger, s Stager) { setStager(m, s) }

// StagingThreshold is the payload size above which the node stages what it
// sends, or 0 when it stages nothing.
func StagingThreshold(m *messenger.Messenger) int { return stagingThreshold(m) }

// WithStagedFailure calls fn when a request for the handler arrived staged
// and its payload could not be fetched (refused for its size, timed out,
// gone): the handler does not run, and fn gets the sender's worker, the
// request's headers (without the staging keys) and the error. A
// fire-and-forget request has no reply to carry the failure, so this is
// how its handler's owner learns of it (the mux ends the one stream the
// headers name). fn runs on a goroutine of its own and must not block
// long.
func WithStagedFailure(fn func(sender ext.WorkerID, headers map[string]string, err error)) messenger.HandlerOption {
	return withStagedFailure(fn)
}

// WithOp names the operation a call serves ("rendezvous get"): a remote
// failure's text then starts with it (RemoteError.Op) instead of the
// handler's name. It sends nothing. velo.WithOp is its public form.
func WithOp(op string) messenger.CallOption { return withOp(op) }

// ResponseTypeOf says what the caller of the request c serves waits for.
func ResponseTypeOf(c *messenger.Context) msgwire.ResponseType { return responseTypeOf(c) }
