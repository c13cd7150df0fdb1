package velo

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"strings"
)

//go:embed debug_page.html
var debugPage []byte

// DebugHandler serves a live view of node, as grpc-go's channelz does for
// its channels: the node's Snapshot as JSON when the request asks for
// ?format=json (or its path ends in ".json"), and otherwise a small HTML
// page that polls that JSON every second and shows peers, calls in
// flight, the stream mux per peer, anchors by phase, rendezvous slots and
// the last peer events. The page is self-contained (no script or style
// from elsewhere). Mount it on one path:
//
//	mux.Handle("/debug/velo", velo.DebugHandler(node))
//
// and read it in a browser or with `velo inspect http://HOST/debug/velo`.
//
// It only reads, and answers GET and HEAD alone. It does show internal
// state (instance and worker ids, peer addresses, error texts), so mount
// it on an admin listener, not on a port that serves the public; anchor
// handles, which are credentials, are shown only in part.
func DebugHandler(node *Node) http.Handler { return debugHandler{node} }

type debugHandler struct{ n *Node }

func (h debugHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "velo: the debug view only reads", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.URL.Query().Get("format") == "json" || strings.HasSuffix(r.URL.Path, ".json") {
		b, err := json.MarshalIndent(h.n.Snapshot(), "", "  ")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The page runs only its own inline script and talks only to this
	// origin.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
	w.Write(debugPage)
}
