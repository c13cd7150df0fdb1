package messenger

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/peerevent"
)

func lostEvent(id ext.InstanceID, err error) peerevent.PeerEvent {
	kind := peerevent.PeerLost
	if errors.Is(err, ext.ErrPeerShutdown) {
		kind = peerevent.PeerShutDown
	}
	return peerevent.PeerEvent{Kind: kind, Instance: id, Worker: id.WorkerID(), Err: err}
}

// onPeerConnected makes one PeerConnected event of the connections a
// transport opens to a peer between two losses.
func (m *Messenger) onPeerConnected(id ext.InstanceID, tr ext.TransportKey, remote string) {
	p, ok := m.peers.get(id)
	if !ok || p.connected.Swap(true) {
		return
	}
	m.notePeerEvent(peerevent.PeerEvent{Kind: peerevent.PeerConnected, Instance: id, Worker: id.WorkerID(), Transport: tr, Remote: remote})
}

// notePeerEvent logs ev at Info and queues it for Config.OnPeerEvent. A
// peer changes state rarely (a connection, a handshake, a loss), so a line
// each is no flood; a peer that flaps is held to the log's rate all the
// same (peerevent_delivery.go).
func (m *Messenger) notePeerEvent(ev peerevent.PeerEvent) {
	m.logPeerEvent(ev)
	m.viewEvents.record(ev)
	m.peerEvents.push(ev)
}

func (m *Messenger) logPeerEvent(ev peerevent.PeerEvent) {
	suppressed, ok := m.peerEventLog.allow(time.Now())
	if !ok {
		return
	}
	attrs := []any{slog.String("instance", ev.Instance.String()), slog.Uint64("worker", uint64(ev.Worker))}
	if p, ok := m.peers.get(ev.Instance); ok {
		keys := make([]string, 0, len(p.info.Address))
		for k := range p.info.Address {
			if k == msgwire.ProofKey { // a mark of Go nodes, not a transport
				continue
			}
			keys = append(keys, string(k))
		}
		slices.Sort(keys)
		attrs = append(attrs, slog.String("transports", strings.Join(keys, ",")))
	}
	if ev.Kind == peerevent.PeerRestarted {
		attrs = append(attrs, slog.String("new_instance", ev.NewInstance.String()))
	}
	if ev.Kind == peerevent.PeerConnected {
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
