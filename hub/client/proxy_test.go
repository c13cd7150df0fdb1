package client_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// lossyProxy stands in front of a hub listener. It forwards each request
// and, for the requests that match its rule, does something else with the
// answer: drops it (closes the connection after the hub acted) or
// replaces it with a proxy's 502 page.
type lossyProxy struct {
	srv    *httptest.Server
	target string

	mu     sync.Mutex
	rule   func(r *http.Request) string // "" forward; "drop"; "502"
	inPut  atomic.Int32                 // service writes and registrations in flight
	maxPut atomic.Int32                 // the most of those at once
	puts   atomic.Int32                 // service writes seen
}

func newLossyProxy(t *testing.T, target string) *lossyProxy {
	p := &lossyProxy{target: target}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *lossyProxy) URL() string { return p.srv.URL }

func (p *lossyProxy) setRule(rule func(r *http.Request) string) {
	p.mu.Lock()
	p.rule = rule
	p.mu.Unlock()
}

func (p *lossyProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	rule := p.rule
	p.mu.Unlock()
	action := ""
	if rule != nil {
		action = rule(r)
	}
	isService := (r.Method == "PUT" || r.Method == "DELETE") && bytes.Contains([]byte(r.URL.Path), []byte("/v1/services/"))
	if isService {
		p.puts.Add(1)
	}
	if isService || isRegister(r) {
		n := p.inPut.Add(1)
		for {
			m := p.maxPut.Load()
			if n <= m || p.maxPut.CompareAndSwap(m, n) {
				break
			}
		}
		defer p.inPut.Add(-1)
	}
	body, _ := io.ReadAll(r.Body)
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch action {
	case "drop":
		// The hub acted; its answer never reaches the client.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case "502":
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html>bad gateway</html>")
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(b)
}

// once matches the first request for which match says yes, and no other.
func once(action string, match func(r *http.Request) bool) func(r *http.Request) string {
	var done atomic.Bool
	return func(r *http.Request) string {
		if match(r) && done.CompareAndSwap(false, true) {
			return action
		}
		return ""
	}
}

func isRegister(r *http.Request) bool { return r.Method == "POST" && r.URL.Path == "/v1/instances" }
