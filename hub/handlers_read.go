package hub

import (
	"net/http"

	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

func (h *Hub) handleHealth(w http.ResponseWriter, _ *http.Request) {
	c := h.st.Continuity()
	status := "ok"
	if c != store.Live {
		status = "degraded"
	}
	writeJSON(w, http.StatusOK, protocol.Health{Status: status, HubID: h.id, Store: c.String()})
}

func (h *Hub) handleHub(w http.ResponseWriter, _ *http.Request) {
	info := protocol.HubInfo{HubID: h.id, Version: Version, Peer: h.hubPeer(), Extensions: []string{}}
	for _, e := range h.plan.exts {
		if e.Name() != protocol.ServicesExtension {
			info.Extensions = append(info.Extensions, e.Name())
		}
	}
	writeJSON(w, http.StatusOK, info)
}

// handleList copies every record; it is for operators and the web page,
// not a request path.
func (h *Hub) handleList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, protocol.InstanceList{Instances: h.instanceList()})
}

// The peer lookups read the store's local view: they go on while the
// store is not Live, from a view that may be stale.
func (h *Hub) handlePeerByInstance(w http.ResponseWriter, r *http.Request) {
	id, err := protocol.ParseInstanceID(r.PathValue(protocol.ParamID))
	if err != nil {
		protocol.WriteError(w, err)
		return
	}
	e, ok := h.st.LookupInstance(id)
	if !ok {
		protocol.WriteError(w, protocol.Errorf(protocol.CodeNotFound, "no peer %s", id))
		return
	}
	writeJSON(w, http.StatusOK, e.Peer)
}

func (h *Hub) handlePeerByWorker(w http.ResponseWriter, r *http.Request) {
	id, err := protocol.ParseWorkerID(r.PathValue(protocol.ParamID))
	if err != nil {
		protocol.WriteError(w, err)
		return
	}
	e, ok := h.st.LookupWorker(id)
	if !ok {
		protocol.WriteError(w, protocol.Errorf(protocol.CodeNotFound, "no peer with worker id %s", id))
		return
	}
	writeJSON(w, http.StatusOK, e.Peer)
}
