package hub

import (
	"net"
	"strconv"
	"unicode"
	"unicode/utf8"

	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/velo-go/velo/transport/tcp"

	"github.com/velo-go/velo/hub/protocol"
)

// instanceList copies every record: for operators, the page and its
// watch, not a request path.
func (h *Hub) instanceList() []protocol.InstanceInfo {
	out := []protocol.InstanceInfo{}
	for _, e := range h.st.List() {
		info := protocol.InstanceInfo{
			Peer:               e.Peer,
			WorkerID:           protocol.FormatWorkerID(e.Peer.WorkerID()),
			Epoch:              e.Epoch,
			Pinned:             e.Pinned,
			LastSeenUnixMillis: e.Touched.UnixMilli(),
		}
		if g := h.auth.get(e.Peer.InstanceID); g != nil && g.kind == grantReserved {
			info.Reserved = true
		}
		for name := range e.Extensions {
			info.Extensions = append(info.Extensions, name)
		}
		slices.Sort(info.Extensions)
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b protocol.InstanceInfo) int {
		return slices.Compare(a.Peer.InstanceID[:], b.Peer.InstanceID[:])
	})
	return out
}

func (h *Hub) snapshot() protocol.InstancesSnapshot {
	list := h.instanceList()
	views := make([]protocol.InstanceView, len(list))
	for i, info := range list {
		addr := make(map[string]string, len(info.Peer.Address))
		for k, v := range info.Peer.Address {
			addr[string(k)] = endpointText(v)
		}
		views[i] = protocol.InstanceView{InstanceInfo: info, Address: addr}
	}
	return protocol.InstancesSnapshot{HubID: h.id, Instances: views, Services: h.dir.all()}
}

// all lists every served name with its members, sorted by name.
func (d *directory) all() []protocol.ServiceInstances {
	d.mu.Lock()
	out := []protocol.ServiceInstances{}
	for name, s := range d.names {
		if len(s.members) > 0 {
			out = append(out, protocol.ServiceInstances{Name: name, Instances: s.sorted()})
		}
	}
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b protocol.ServiceInstances) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// handleWatchInstances streams an InstancesSnapshot at once, after each
// change, and on every keep-alive tick. It ends when the client goes or
// the hub stops.
func (h *Hub) handleWatchInstances(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		protocol.WriteError(w, protocol.Errorf(protocol.CodeInternal, "streaming is not supported here"))
		return
	}
	notes, stop := h.chg.subscribe()
	defer stop()
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", protocol.WatchContentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(h.timing.keepAlive)
	defer tick.Stop()
	for {
		if err := writeSnapshot(w, h.snapshot()); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-notes:
		case <-tick.C:
		case <-h.stopping:
			return
		case <-r.Context().Done():
			return
		}
	}
}

func writeSnapshot(w http.ResponseWriter, s protocol.InstancesSnapshot) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", protocol.WatchInstancesEvent, b)
	return err
}

// endpointText spells an endpoint for people: the interface list that the
// socket transports share (TCP, its stream listener, QUIC) as host:port
// pairs, printable text as it is, anything else by its size.
func endpointText(raw []byte) string {
	if ifs, err := tcp.ParseEndpoint(raw); err == nil {
		parts := make([]string, len(ifs))
		for i, f := range ifs {
			parts[i] = net.JoinHostPort(f.IP, strconv.Itoa(int(f.Port)))
		}
		return strings.Join(parts, ",")
	}
	if utf8.Valid(raw) && !strings.ContainsFunc(string(raw), func(r rune) bool { return !unicode.IsPrint(r) }) {
		return string(raw)
	}
	return fmt.Sprintf("<%d bytes>", len(raw))
}
