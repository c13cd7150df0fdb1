package messenger

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/velo-go/velo/ext"
)

// PeerEventKind says what happened to a peer.
type PeerEventKind uint8

// Peer event kinds. Each is reported once per change of the peer's state,
// never per message.
const (
	// PeerGreeted: this node's handshake with the peer succeeded; calls
	// to it go out from now on.
	PeerGreeted PeerEventKind = iota + 1
	// PeerLost: a transport lost its connection to a greeted peer
	// without a goodbye (a crash, a kill, a cut). Calls waiting on it
	// failed with ErrPeerUnreachable. Redials that fail before the next
	// greeting are not reported again.
	PeerLost
	// PeerShutDown: a greeted peer said goodbye (it shut down in order).
	PeerShutDown
	// PeerRestarted: another instance answers at the peer's address.
	// NewInstance names it; calls to the old instance fail with
	// ErrPeerRestarted.
	PeerRestarted
	// PeerConnected: a transport opened a connection to the peer, the
	// first since this node started or since the peer was last lost.
	// Transport and Remote say which transport and what address. Further
	// lanes to the same peer are not reported again.
	PeerConnected
)

func (k PeerEventKind) String() string {
	switch k {
	case PeerGreeted:
		return "greeted"
	case PeerLost:
		return "lost"
	case PeerShutDown:
		return "shut down"
	case PeerRestarted:
		return "restarted"
	case PeerConnected:
		return "connected"
	}
	return "unknown"
}

// PeerEvent is one change in what this node knows of a peer.
type PeerEvent struct {
	Kind     PeerEventKind
	Instance ext.InstanceID
	Worker   ext.WorkerID
	// NewInstance is the instance that now answers (PeerRestarted only).
	NewInstance ext.InstanceID
	// Transport and Remote are the transport that connected and the
	// address it reached (PeerConnected only).
	Transport ext.TransportKey
	Remote    string
	// Err is the error that calls to the peer failed with (Lost,
	// ShutDown, Restarted); nil for Greeted.
	Err error
}

func lostEvent(id ext.InstanceID, err error) PeerEvent {
	kind := PeerLost
	if errors.Is(err, ext.ErrPeerShutdown) {
		kind = PeerShutDown
	}
	return PeerEvent{Kind: kind, Instance: id, Worker: id.WorkerID(), Err: err}
}

// onPeerConnected makes one PeerConnected event of the connections a
// transport opens to a peer between two losses.
func (m *Messenger) onPeerConnected(id ext.InstanceID, tr ext.TransportKey, remote string) {
	p, ok := m.peers.get(id)
	if !ok || p.connected.Swap(true) {
		return
	}
	m.notePeerEvent(PeerEvent{Kind: PeerConnected, Instance: id, Worker: id.WorkerID(), Transport: tr, Remote: remote})
}

// notePeerEvent logs ev at Info and queues it for Config.OnPeerEvent. A
// peer changes state rarely (a connection, a handshake, a loss), so a line
// each is no flood; a peer that flaps is held to the log's rate all the
// same (peerevent_delivery.go).
func (m *Messenger) notePeerEvent(ev PeerEvent) {
	m.logPeerEvent(ev)
	m.peerEvents.push(ev)
}

func (m *Messenger) logPeerEvent(ev PeerEvent) {
	suppressed, ok := m.peerEventLog.allow(time.Now())
	if !ok {
		return
	}
	attrs := []any{slog.String("instance", ev.Instance.String()), slog.Uint64("worker", uint64(ev.Worker))}
	if p, ok := m.peers.get(ev.Instance); ok {
		keys := make([]string, 0, len(p.info.Address))
		for k := range p.info.Address {
			if k == ProofKey { // a mark of Go nodes, not a transport
				continue
			}
			keys = append(keys, string(k))
		}
		slices.Sort(keys)
		attrs = append(attrs, slog.String("transports", strings.Join(keys, ",")))
	}
	if ev.Kind == PeerRestarted {
		attrs = append(attrs, slog.String("new_instance", ev.NewInstance.String()))
	}
	if ev.Kind == PeerConnected {
		attrs = append(attrs, slog.String("transport", string(ev.Transport)), slog.String("address", ev.Remote))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("err", ev.Err.Error()))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	m.logger().Info("velo: peer "+ev.Kind.String(), attrs...)
}
