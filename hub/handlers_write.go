package hub

import (
	"context"
	"errors"
	"net/http"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// spawn runs fn as a task of the hub: a goroutine that the request does
// not own, so a client that disconnects cannot leave an owner busy.
// Shutdown waits for the tasks. It answers false once the hub stops.
func (h *Hub) spawn(fn func()) bool {
	h.taskMu.Lock()
	defer h.taskMu.Unlock()
	if h.tasksClosed {
		return false
	}
	h.tasks.Add(1)
	go func() {
		defer h.tasks.Done()
		fn()
	}()
	return true
}

type regAnswer struct {
	resp protocol.RegisterResponse
	err  error
}

func (h *Hub) handleRegister(w http.ResponseWriter, r *http.Request) {
	body, err := h.readBody(r, h.cfg.MaxBodyBytes)
	if err != nil {
		protocol.WriteError(w, err)
		return
	}
	q := regRequest{body: body, cred: protocol.Credential(r.Header.Get(protocol.CredentialHeader))}
	ch := make(chan regAnswer, 1)
	if !h.spawn(func() {
		resp, err := h.register(q)
		ch <- regAnswer{resp, err}
	}) {
		protocol.WriteError(w, errStopping)
		return
	}
	select {
	case a := <-ch:
		if a.err != nil {
			protocol.WriteError(w, a.err)
			return
		}
		writeJSON(w, http.StatusOK, a.resp)
	case <-r.Context().Done():
		// The client left; the task finishes the registration anyway.
	}
}

func (h *Hub) handleUnregister(w http.ResponseWriter, r *http.Request) {
	owner, err := protocol.ParseInstanceID(r.PathValue(protocol.ParamID))
	if err != nil {
		protocol.WriteError(w, err)
		return
	}
	cred := protocol.Credential(r.Header.Get(protocol.CredentialHeader))
	ch := make(chan error, 1)
	if !h.spawn(func() { ch <- h.unregister(owner, cred) }) {
		protocol.WriteError(w, errStopping)
		return
	}
	select {
	case err := <-ch:
		if err != nil {
			protocol.WriteError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case <-r.Context().Done():
	}
}

// unregister removes the owner's registration under the lock and
// delivers the removal itself: when it answers, each extension has
// dropped the owner. The hook's queued delivery changes nothing more.
func (h *Hub) unregister(owner ext.InstanceID, cred protocol.Credential) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = protocol.Errorf(protocol.CodeInternal, "unregister failed")
		}
	}()
	if cred == "" {
		return protocol.Errorf(protocol.CodeUnauthorized, "the %s header is missing", protocol.CredentialHeader)
	}
	unlock, err := h.acquire()
	if err != nil {
		return err
	}
	defer unlock()
	lease, err := h.auth.Authorize(owner, cred)
	if err != nil {
		return err
	}
	// No revoke before the remove: the removal hook revokes as the remove
	// applies (before Remove returns, or later for one that timed out).
	// A remove the store refused leaves the registration as it was, so
	// its credential can retry the unregistration instead of answering
	// busy for ever.
	if !h.removeEntry(owner, lease.Incarnation) {
		return protocol.Errorf(protocol.CodeUnavailable, "the store did not confirm the removal: retry")
	}
	h.deliverRemoval(owner, lease.Incarnation)
	return nil
}

func (h *Hub) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	if _, err := h.readBody(r, protocol.MaxSmallBody); err != nil {
		protocol.WriteError(w, err)
		return
	}
	owner, lease, err := h.authorized(r)
	if err != nil {
		protocol.WriteError(w, err)
		return
	}
	switch err := h.st.Touch(owner, lease.Incarnation); {
	case errors.Is(err, store.ErrNotFound):
		protocol.WriteError(w, protocol.Errorf(protocol.CodeNotFound, "no registration of %s", owner))
		return
	case errors.Is(err, store.ErrConflict):
		protocol.WriteError(w, protocol.Errorf(protocol.CodeUnauthorized, "the credential's registration was replaced"))
		return
	case err != nil:
		protocol.WriteError(w, protocol.Errorf(protocol.CodeUnavailable, "the store refused the touch"))
		return
	}
	writeJSON(w, http.StatusOK, protocol.HeartbeatResponse{OK: true, HubID: h.id, Epoch: lease.Epoch})
}

// handleProbe sends one heartbeat to the instance over velo now and says
// how it went; a success touches the entry, as the heartbeat's does.
func (h *Hub) handleProbe(w http.ResponseWriter, r *http.Request) {
	if _, err := h.readBody(r, protocol.MaxSmallBody); err != nil {
		protocol.WriteError(w, err)
		return
	}
	owner, err := protocol.ParseInstanceID(r.PathValue(protocol.ParamID))
	if err != nil {
		protocol.WriteError(w, err)
		return
	}
	if h.node == nil {
		protocol.WriteError(w, protocol.Errorf(protocol.CodeUnavailable, "this hub runs without velo: it does not probe"))
		return
	}
	e, ok := h.st.LookupInstance(owner)
	if !ok || e.Pinned {
		protocol.WriteError(w, protocol.Errorf(protocol.CodeNotFound, "no registration of %s", owner))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.heartbeatInterval())
	defer cancel()
	res := h.probeOnce(ctx, e)
	if res.OK {
		_ = h.st.Touch(owner, e.Incarnation)
	}
	writeJSON(w, http.StatusOK, res)
}
