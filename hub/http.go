package hub

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/velo-go/velo/hub/protocol"
)

// maxHeaderBytes bounds a request's headers: the hub reads only a
// credential and the usual HTTP headers.
const maxHeaderBytes = 16 << 10

// newServer builds one listener's server. ReadHeaderTimeout and
// ReadTimeout stop a slow-loris client from holding a connection with a
// request it never finishes; a service watch clears its read deadline once
// its request is read. No WriteTimeout: a watch streams for as long as
// it is open.
func (h *Hub) newServer(mux *http.ServeMux) *http.Server {
	return &http.Server{
		Handler:           &router{h: h, mux: mux},
		ReadHeaderTimeout: h.timing.readHeader,
		ReadTimeout:       h.timing.read,
		IdleTimeout:       h.timing.idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(h.log.Handler(), slog.LevelDebug),
	}
}

// router answers every request that matches no route, or matches a path
// with another method, with an ErrorBody (ServeMux would answer plain
// text), and counts the handlers in flight for Shutdown.
type router struct {
	h   *Hub
	mux *http.ServeMux
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt.h.reqs.add()
	defer rt.h.reqs.done()
	handler, pattern := rt.mux.Handler(r)
	if pattern != "" {
		rt.mux.ServeHTTP(w, r)
		return
	}
	// Let the mux say what it would answer (404, 405 with Allow, or a
	// redirect to a cleaned path), then answer that as an ErrorBody.
	probe := &statusProbe{header: http.Header{}}
	handler.ServeHTTP(probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", probe.header.Get("Allow"))
		protocol.WriteError(w, protocol.Errorf(protocol.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	protocol.WriteError(w, protocol.Errorf(protocol.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
}

// statusProbe records a status and headers and drops the body.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// inflight counts the HTTP handlers running, so Shutdown can wait for
// them within its budget.
type inflight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil while n is 0
}

func (f *inflight) add() {
	f.mu.Lock()
	if f.n == 0 {
		f.zero = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

func (f *inflight) done() {
	f.mu.Lock()
	f.n--
	if f.n == 0 {
		close(f.zero)
		f.zero = nil
	}
	f.mu.Unlock()
}

// wait returns true once no handler runs, false when d passed first.
func (f *inflight) wait(d time.Duration) bool {
	f.mu.Lock()
	ch := f.zero
	f.mu.Unlock()
	if ch == nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// serveListener runs srv on ln until Shutdown; its goroutine is a loop of
// the hub.
func (h *Hub) serveListener(srv *http.Server, ln net.Listener) {
	defer h.servers.Done()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		h.log.Error("hub: listener stopped", "addr", ln.Addr(), "err", err)
	}
}

// drainServers closes the listeners and waits up to d for the requests in
// flight; then it closes every connection and waits up to d again for
// the handlers to return.
func (h *Hub) drainServers(d time.Duration) {
	var wg sync.WaitGroup
	for _, srv := range []*http.Server{h.srvPublic, h.srvCtrl} {
		if srv == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
		}()
	}
	wg.Wait()
	if !h.reqs.wait(d) {
		h.log.Warn("hub: handlers still running after the listener drain")
	}
	h.servers.Wait()
}
