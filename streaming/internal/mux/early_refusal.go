package mux

import (
	"fmt"

	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// A staged record refused for its size (stagedFailure) can be refused
// before its stream's OpenSlot is applied: the batch that carried the
// OpenSlot was staged too and is still being fetched, while the refused
// one was turned down as soon as its descriptor arrived. The refusal is
// kept for the OpenSlot, which then ends its stream at once with the
// TransportError, instead of leaving it to the stream watchdog. What is
// kept is per sender and lane and bounded (the oldest goes first), so a
// peer that sends refusals for streams that never open grows nothing and
// can only lose its own early refusals.

// MaxEarlyRefusals bounds the early refusals kept per sender and lane.
const MaxEarlyRefusals = 16

// earlyRefusal is a staged record refused before its stream's OpenSlot.
type earlyRefusal struct {
	epoch   uint64
	slot    muxwire.SlotID
	session uint64
	msg     string
}

// keepRefusalLocked keeps r for its OpenSlot. A refusal of an epoch the
// table has left can never be claimed and is not kept. The caller holds
// ip.mu.
func (ip *IngressPeer) keepRefusalLocked(r earlyRefusal) {
	if ip.haveEpoch && r.epoch < ip.Epoch {
		return
	}
	if len(ip.Early) == MaxEarlyRefusals {
		copy(ip.Early, ip.Early[1:])
		ip.Early = ip.Early[:MaxEarlyRefusals-1]
	}
	ip.Early = append(ip.Early, r)
}

// takeRefusalLocked returns and forgets the refusal kept for the stream
// an OpenSlot of the current epoch opens, if any. The caller holds ip.mu.
func (ip *IngressPeer) takeRefusalLocked(slot muxwire.SlotID, session uint64) (msg string, ok bool) {
	for i, r := range ip.Early {
		if r.epoch == ip.Epoch && r.slot == slot && r.session == session {
			ip.Early = append(ip.Early[:i], ip.Early[i+1:]...)
			return r.msg, true
		}
	}
	return "", false
}

// refusedMessage is the TransportError text of a refused staged record.
func refusedMessage(cause error) string {
	return fmt.Sprintf("velo: a stream record staged by its producer could not be fetched: %v", cause)
}

// endRefusedLocked ends s because a staged record of its stream could not
// be fetched: its consumer reads a TransportError with msg. The caller
// holds ip.mu and tells the producer.
func (ip *IngressPeer) endRefusedLocked(s *InSlot, msg string) {
	s.terminal = true
	s.end(wire.AppendErrorFrame(nil, wire.KindTransportError, msg), false)
	ip.endLocked(s, false)
}
