package hub

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// Routes is where an extension adds its HTTP routes: every pattern is
// placed under /v1/ext/{name}/, so an extension cannot reach a core path.
type Routes struct {
	mux    *http.ServeMux
	prefix string // /v1/ext/{name}
	hub    *Hub
}

// Handle adds h for pattern, "[METHOD ]/path" relative to the extension's
// prefix: "GET /items/{id}" serves GET /v1/ext/{name}/items/{id}.
func (r *Routes) Handle(pattern string, h http.Handler) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	if !strings.HasPrefix(path, "/") {
		panic(fmt.Sprintf("hub: extension route %q must start with /", pattern))
	}
	full := r.prefix + path
	if method != "" {
		full = method + " " + full
	}
	r.mux.Handle(full, h)
}

// HandleFunc is Handle for a function.
func (r *Routes) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	r.Handle(pattern, http.HandlerFunc(h))
}

// Authorized reads the {id} path parameter and the credential header of
// req and authorizes them, as the core routes do. Its error is a
// *protocol.Error to answer with protocol.WriteError.
func (r *Routes) Authorized(req *http.Request) (ext.InstanceID, Lease, error) {
	return r.hub.authorized(req)
}

// DecodeJSON reads req's body (at most the hub's max_body_bytes) into v.
// Its error is a *protocol.Error (bad_request or payload_too_large).
func (r *Routes) DecodeJSON(req *http.Request, v any) error {
	b, err := r.hub.readBody(req, r.hub.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	return protocol.DecodeJSON(b, v)
}

// WriteJSON answers v with status as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// authorized is the Authorized extractor of the core routes.
func (h *Hub) authorized(req *http.Request) (ext.InstanceID, Lease, error) {
	owner, err := protocol.ParseInstanceID(req.PathValue(protocol.ParamID))
	if err != nil {
		return owner, Lease{}, err
	}
	cred := protocol.Credential(req.Header.Get(protocol.CredentialHeader))
	if cred == "" {
		return owner, Lease{}, protocol.Errorf(protocol.CodeUnauthorized, "the %s header is missing", protocol.CredentialHeader)
	}
	lease, err := h.auth.Authorize(owner, cred)
	return owner, lease, err
}

// readBody reads req's body, at most limit bytes (413 past it).
func (h *Hub) readBody(req *http.Request, limit int64) ([]byte, error) {
	return protocol.ReadBody(io.LimitReader(req.Body, limit+1), limit)
}
