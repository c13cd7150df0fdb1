package hub

import (
	_ "embed"
	"net/http"
)

// uiPage is the operator's read-only page: it follows GET
// /v1/instances/watch and draws the instances and services. It uses no
// external script, so it works on a host with no way out.
//
//go:embed ui/index.html
var uiPage []byte

// serveUI answers GET / on the public listener with the page.
func serveUI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(uiPage)
}
