package msgrx

import (
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/messenger"
)

var (
	postLaneOutcome = typed[func(*messenger.Messenger, ext.InstanceID, int, string, []byte, ...messenger.CallOption) (ext.SendOutcome, error)]("PostLaneOutcome", hook.Fns.PostLaneOutcome)
	postLaneOwned   = typed[func(*messenger.Messenger, ext.InstanceID, int, string, []byte, ext.Owner) (ext.SendOutcome, error)]("PostLaneOwned", hook.Fns.PostLaneOwned)
	post            = typed[func(*messenger.Messenger, ext.InstanceID, string, []byte) error]("Post", hook.Fns.Post)
	postLane        = typed[func(*messenger.Messenger, ext.InstanceID, int, string, []byte) error]("PostLane", hook.Fns.PostLane)
	lanes           = typed[func(*messenger.Messenger, ext.InstanceID) int]("Lanes", hook.Fns.Lanes)
)

// Post is Send that never waits: it hands the message to the transport and
// returns, even when the peer's send channel is full (the message then
// waits in the transport's admission gate). Only a message that could not
// be handed over at all returns an error. It skips the handshake, so it
// takes only system handler names ('_').
func Post(m *messenger.Messenger, target ext.InstanceID, handler string, payload []byte) error {
	return post(m, target, handler, payload)
}

// PostLane is Post on one of the ordered lanes the transport keeps to
// target (0 <= lane < Lanes(m, target)): messages on one lane arrive in
// the order they were posted; lanes are not ordered against each other.
func PostLane(m *messenger.Messenger, target ext.InstanceID, lane int, handler string, payload []byte) error {
	return postLane(m, target, lane, handler, payload)
}

// PostLaneOutcome is PostLane that also returns the transport's outcome:
// Admitted, or Pending when the message waits in the lane's admission
// gate (a congested peer). A caller that must know the message reached the
// send channel, or that it was refused after all, waits on the outcome.
func PostLaneOutcome(m *messenger.Messenger, target ext.InstanceID, lane int, handler string, payload []byte, opts ...messenger.CallOption) (ext.SendOutcome, error) {
	return postLaneOutcome(m, target, lane, handler, payload, opts...)
}

// PostLaneOwned is PostLaneOutcome for a payload owned by owner, which the
// transport retains while it holds the bytes (ext.Owner); the caller keeps
// its own reference and releases it when the call returns. It is for
// subsystems that reuse their send buffers (the mux's batches). It never
// stages: the caller keeps payloads under StagingThreshold and the
// transport's message size. A transport that is not an ext.OwnerRetainer
// gets a copy.
func PostLaneOwned(m *messenger.Messenger, target ext.InstanceID, lane int, handler string, payload []byte, owner ext.Owner) (ext.SendOutcome, error) {
	return postLaneOwned(m, target, lane, handler, payload, owner)
}

// Lanes is how many ordered lanes the transport to target keeps; for a
// target not registered (or the zero InstanceID), the most that any of the
// node's transports keeps. It is at least 1.
func Lanes(m *messenger.Messenger, target ext.InstanceID) int { return lanes(m, target) }
