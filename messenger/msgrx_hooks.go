package messenger

import "github.com/velo-go/velo/internal/msgrx/hook"

// The entry points that only velo's own packages use (streaming, events,
// rendezvous, velo) are unexported here and reached through package
// internal/msgrx, which gives each its type back; see package hook for why
// they travel as values. Each is a method expression, so a call through
// msgrx costs one indirect call and nothing else.
func init() {
	f := &hook.Fns
	f.PostLaneOutcome = (*Messenger).postLaneOutcome
	f.PostLaneOwned = (*Messenger).postLaneOwned
	f.Post = (*Messenger).post
	f.PostLane = (*Messenger).postLane
	f.Lanes = (*Messenger).laneCount
	f.FireAndAwait = (*Messenger).fireAndAwaitOp
	f.UnaryAsyncView = (*Messenger).unaryAsyncView
	f.UnaryAsyncCall = (*Messenger).unaryAsyncCall
	f.Abandon = (*Messenger).abandonCall
	f.StagingThreshold = (*Messenger).stagingThreshold
	f.SetStager = (*Messenger).setStager
	f.PeerInfoOf = (*Messenger).peerInfoOf
	f.InstanceOf = (*Messenger).instanceOf
	f.ResolveWorker = (*Messenger).resolveWorker
	f.Handshake = (*Messenger).handshakeWith
	f.AdvertiseAddress = (*Messenger).advertiseAddress
	f.RegisterSystem = (*Messenger).registerSystem
	f.Acknowledge = (*Messenger).acknowledge
	f.OnPeerLost = (*Messenger).addPeerLostHook
	f.WatchUndelivered = (*Messenger).watchUndelivered
	f.OnTeardown = (*Messenger).onTeardown
	f.Stopped = (*Messenger).stoppedChan
	f.Handshakes = (*Messenger).handshakeCount
	f.UnmatchedReplies = (*Messenger).unmatchedReplies
	f.ResponseTypeOf = (*Context).responseType
	f.WithStagedFailure = withStagedFailure
	f.WithOp = withOp
	f.LendAnswer = (*Context).lendAnswer
}
