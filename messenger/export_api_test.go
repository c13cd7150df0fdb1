package messenger

import (
	"context"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/peerevent"
)

// The names this package's tests were written against, from before the
// messenger's internal entry points and its error and wire vocabulary left
// its API (for internal/msgrx, internal/msgerr, internal/msgwire and
// internal/peerevent). Each is the new definition under its old name, so
// the tests read as they did and check the same behaviour.

type (
	Code          = msgerr.Code
	Error         = msgerr.Error
	RemoteError   = msgerr.RemoteError
	ResponseType  = msgwire.ResponseType
	ResponseID    = msgwire.ResponseID
	PeerEvent     = peerevent.PeerEvent
	PeerEventKind = peerevent.PeerEventKind
	Stager        = hook.Stager
	IdentityStats = gateStats
	DispatchMode  = dispatchMode
)

const (
	OK                 = msgerr.OK
	Canceled           = msgerr.Canceled
	Unknown            = msgerr.Unknown
	InvalidArgument    = msgerr.InvalidArgument
	DeadlineExceeded   = msgerr.DeadlineExceeded
	NotFound           = msgerr.NotFound
	AlreadyExists      = msgerr.AlreadyExists
	PermissionDenied   = msgerr.PermissionDenied
	ResourceExhausted  = msgerr.ResourceExhausted
	FailedPrecondition = msgerr.FailedPrecondition
	Aborted            = msgerr.Aborted
	OutOfRange         = msgerr.OutOfRange
	Unimplemented      = msgerr.Unimplemented
	Internal           = msgerr.Internal
	Unavailable        = msgerr.Unavailable
	DataLoss           = msgerr.DataLoss
	Unauthenticated    = msgerr.Unauthenticated
	UserCodeMin        = msgerr.UserCodeMin

	FireAndForget      = msgwire.FireAndForget
	AckNack            = msgwire.AckNack
	UnaryResponse      = msgwire.UnaryResponse
	CodeHeader         = msgwire.CodeHeader
	ReasonHeader       = msgwire.ReasonHeader
	DeadlineHeader     = msgwire.DeadlineHeader
	StagedHandleHeader = msgwire.StagedHandleHeader
	StagedBudgetHeader = msgwire.StagedBudgetHeader
	MaxHeaderValue     = msgwire.MaxHeaderValue
	MaxEncodedHeaders  = msgwire.MaxEncodedHeaders
	ProofKey           = msgwire.ProofKey
	ProofTimeout       = msgwire.ProofTimeout
	PeerShutdownGrace  = msgwire.PeerShutdownGrace
	SystemHandlerLabel = msgwire.SystemHandlerLabel

	PeerGreeted   = peerevent.PeerGreeted
	PeerLost      = peerevent.PeerLost
	PeerShutDown  = peerevent.PeerShutDown
	PeerRestarted = peerevent.PeerRestarted
	PeerConnected = peerevent.PeerConnected

	Spawn             = modeSpawn
	Ordered           = modeOrdered
	OrderedGlobal     = modeOrderedGlobal
	Inline            = modeInline
	TeardownHookGrace = teardownHookGrace

	maxReason = msgerr.MaxReason
)

var (
	ErrMalformedHeader = msgwire.ErrMalformedHeader

	NewError          = msgerr.NewError
	Errorf            = msgerr.Errorf
	NewSentinel       = msgerr.NewSentinel
	ErrorCode         = msgerr.ErrorCode
	NameOp            = msgerr.NameOp
	EncodeHeaders     = msgwire.EncodeHeaders
	DecodeHeaders     = msgwire.DecodeHeaders
	WithOp            = withOp
	WithStagedFailure = withStagedFailure

	validReason    = msgerr.ValidReason
	readResponseID = msgwire.ReadResponseID
)

// AsyncCall is msgrx.AsyncCall under its old name (msgrx imports this
// package, so its tests cannot).
type AsyncCall struct {
	m     *Messenger
	token uint64
}

func (c AsyncCall) Abandon(err error) bool {
	if c.m == nil {
		return false
	}
	return c.m.abandonCall(c.token, err)
}

func (m *Messenger) UnaryAsyncCall(ctx context.Context, target ext.InstanceID, handler string, payload []byte, done func(resp []byte, err error), opts ...CallOption) (AsyncCall, error) {
	token, err := m.unaryAsyncCall(ctx, target, handler, payload, done, opts...)
	if token == 0 {
		return AsyncCall{}, err
	}
	return AsyncCall{m: m, token: token}, err
}

func (c *Context) ResponseType() ResponseType { return c.responseType() }

func (m *Messenger) PostLaneOutcome(target ext.InstanceID, lane int, handler string, payload []byte, opts ...CallOption) (ext.SendOutcome, error) {
	return m.postLaneOutcome(target, lane, handler, payload, opts...)
}

func (m *Messenger) PostLaneOwned(target ext.InstanceID, lane int, handler string, payload []byte, owner ext.Owner) (ext.SendOutcome, error) {
	return m.postLaneOwned(target, lane, handler, payload, owner)
}

func (m *Messenger) Post(target ext.InstanceID, handler string, payload []byte) error {
	return m.post(target, handler, payload)
}

func (m *Messenger) PostLane(target ext.InstanceID, lane int, handler string, payload []byte) error {
	return m.postLane(target, lane, handler, payload)
}

func (m *Messenger) Lanes(target ext.InstanceID) int { return m.laneCount(target) }

func (m *Messenger) FireAndAwait(ctx context.Context, target ext.InstanceID, handler string, build func(ResponseID) []byte, opts ...CallOption) ([]byte, error) {
	return m.fireAndAwaitOp(ctx, target, handler, build, opts...)
}

func (m *Messenger) UnaryAsyncView(ctx context.Context, target ext.InstanceID, handler string, payload []byte, done func(resp []byte, err error)) error {
	return m.unaryAsyncView(ctx, target, handler, payload, nil, done)
}

func (m *Messenger) UnaryAsyncInto(ctx context.Context, target ext.InstanceID, handler string, payload []byte, into func(int) []byte, done func(resp []byte, err error)) error {
	return m.unaryAsyncView(ctx, target, handler, payload, into, done)
}

func (m *Messenger) StagingThreshold() int { return m.stagingThreshold() }
func (m *Messenger) SetStager(s Stager)    { m.setStager(s) }

func (m *Messenger) PeerInfoOf(w ext.WorkerID) (ext.PeerInfo, bool)   { return m.peerInfoOf(w) }
func (m *Messenger) InstanceOf(w ext.WorkerID) (ext.InstanceID, bool) { return m.instanceOf(w) }

func (m *Messenger) ResolveWorker(ctx context.Context, w ext.WorkerID) (ext.InstanceID, error) {
	return m.resolveWorker(ctx, w)
}

func (m *Messenger) Handshake(ctx context.Context, target ext.InstanceID) error {
	return m.handshakeWith(ctx, target)
}

func (m *Messenger) AdvertiseAddress(key ext.TransportKey, endpoint []byte) error {
	return m.advertiseAddress(key, endpoint)
}

func (m *Messenger) RegisterSystem(h Handler) error             { return m.registerSystem(h) }
func (m *Messenger) Acknowledge(id ResponseID, err error) error { return m.acknowledge(id, err) }

func (m *Messenger) OnPeerLost(fn func(peer ext.InstanceID, err error)) { m.addPeerLostHook(fn) }

func (m *Messenger) WatchUndelivered(handler string, fn func(payload []byte, err error)) {
	m.watchUndelivered(handler, fn)
}

func (m *Messenger) OnTeardown(fn func())         { m.onTeardown(fn) }
func (m *Messenger) Stopped() <-chan struct{}     { return m.stoppedChan() }
func (m *Messenger) Handshakes() int64            { return m.handshakeCount() }
func (m *Messenger) UnmatchedReplies() int64      { return m.unmatchedReplies() }
func (m *Messenger) IdentityStats() IdentityStats { return m.identityStats() }
func (m *Messenger) DiscoveredPeers() int         { return m.discoveredPeers() }
func (m *Messenger) CallsFailedByPeerLoss() int64 { return m.callsFailedByPeerLoss() }

func (c *Context) LendAnswer(l *hook.Loan) { c.lendAnswer(l) }
