package hub

import (
	"net/http"
	"strings"

	"github.com/velo-go/velo/hub/protocol"
)

// routes builds one listener's mux: the core routes (the control listener
// adds the mutations), the service directory's, and each extension's
// under /v1/ext/{name}/. It runs each extension's route code, so a panic
// there fails startup.
func (h *Hub) routes(control bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc(protocol.RouteHealth, h.handleHealth)
	mux.HandleFunc(protocol.RouteHub, h.handleHub)
	mux.HandleFunc(protocol.RouteListInstances, h.handleList)
	mux.HandleFunc(protocol.RouteWatchInstances, h.handleWatchInstances)
	mux.HandleFunc(protocol.RoutePeerByInstance, h.handlePeerByInstance)
	mux.HandleFunc(protocol.RoutePeerByWorker, h.handlePeerByWorker)
	h.dir.routes(mux, control)
	if !control {
		mux.HandleFunc(protocol.RouteUI, serveUI)
	}
	if control {
		mux.HandleFunc(protocol.RouteRegister, h.handleRegister)
		mux.HandleFunc(protocol.RouteUnregister, h.handleUnregister)
		mux.HandleFunc(protocol.RouteHeartbeat, h.handleHeartbeat)
		mux.HandleFunc(protocol.RouteProbe, h.handleProbe)
	}
	for _, e := range h.plan.exts {
		rs := &Routes{mux: mux, prefix: strings.TrimSuffix(protocol.ExtPath(e.Name(), ""), "/"), hub: h}
		if p, ok := e.(PublicRouter); ok && !control {
			p.PublicRoutes(rs)
		}
		if c, ok := e.(ControlRouter); ok && control {
			c.ControlRoutes(rs)
		}
	}
	return mux
}
