package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// HubServices is the hub as a node's service discovery
// (velo.WithServiceDiscovery). Lookups read the hub's directory; a
// node's RegisterService becomes a guard of the client (RegisterService),
// so the name rides on the client's registration. It implements
// ext.ServiceWatcher with the hub's watch stream, which velo's service
// resolver follows instead of listing again, and ext.ServiceLister.
type HubServices struct {
	s *state

	mu     sync.Mutex
	guards map[string]*ServiceGuard // the plain RegisterService's guards
}

var (
	_ ext.ServiceDiscovery = (*HubServices)(nil)
	_ ext.ServiceRegistrar = (*HubServices)(nil)
	_ ext.ServiceWatcher   = (*HubServices)(nil)
	_ ext.ServiceLister    = (*HubServices)(nil)
)

// Services returns the client's service discovery handle.
func (c *HubClient) Services() *HubServices {
	return &HubServices{s: c.s, guards: map[string]*ServiceGuard{}}
}

// checkSelf refuses to serve a name for an instance other than the
// client's own: the hub takes service writes only under an instance's
// own credential.
func (h *HubServices) checkSelf(id ext.InstanceID) error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if h.s.hasPeer && h.s.peer.InstanceID != id {
		return fmt.Errorf("hub client: instance %s cannot serve for %s", h.s.peer.InstanceID, id)
	}
	return nil
}

// RegisterServiceInstance serves service under the client's registration
// and returns its guard.
func (h *HubServices) RegisterServiceInstance(ctx context.Context, service string, id ext.InstanceID) (ext.Registration, error) {
	if err := h.checkSelf(id); err != nil {
		return nil, err
	}
	return h.s.registerService(ctx, service)
}

// RegisterService is RegisterServiceInstance keeping the guard, which
// UnregisterService closes.
func (h *HubServices) RegisterService(ctx context.Context, service string, id ext.InstanceID) error {
	if err := h.checkSelf(id); err != nil {
		return err
	}
	g, err := h.s.registerService(ctx, service)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.guards[service] = g
	h.mu.Unlock()
	return nil
}

// UnregisterService closes the guard RegisterService kept.
func (h *HubServices) UnregisterService(ctx context.Context, service string, id ext.InstanceID) error {
	h.mu.Lock()
	g := h.guards[service]
	delete(h.guards, service)
	h.mu.Unlock()
	if g == nil {
		return nil
	}
	return g.Unregister(ctx)
}

// ListService asks the hub which instances serve service.
func (h *HubServices) ListService(ctx context.Context, service string) ([]ext.InstanceID, error) {
	if err := protocol.ValidateServiceName(service); err != nil {
		return nil, err
	}
	var out protocol.ServiceInstances
	if err := h.s.do(ctx, public, "list service", "GET", protocol.ServicePath(service), "", nil, &out); err != nil {
		return nil, unavailable(err)
	}
	return out.Instances, nil
}

// ListServices asks the hub for the names that have an instance.
func (h *HubServices) ListServices(ctx context.Context) ([]string, error) {
	var out protocol.ServiceList
	if err := h.s.do(ctx, public, "list services", "GET", protocol.PathServices, "", nil, &out); err != nil {
		return nil, err
	}
	return out.Services, nil
}

// WatchService follows the hub's watch of service: a ServiceInitial
// event, then ServiceAdded and ServiceRemoved; when the stream ends
// (the hub cut a watcher that fell behind, or stopped) a
// ServiceDisconnected event, and the channel closes. It closes when ctx
// ends too.
func (h *HubServices) WatchService(ctx context.Context, service string) (<-chan ext.ServiceEvent, error) {
	if err := protocol.ValidateServiceName(service); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "GET", h.s.url(public, protocol.WatchServicePath(service)), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", protocol.WatchContentType)
	resp, err := h.s.stream.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("hub client: watch %s: %w", service, err)
		}
		// Refused, or broken before the hub answered: either way it
		// said nothing about the service.
		return nil, fmt.Errorf("hub client: watch %s: %w: %w", service, ext.ErrDiscoveryUnavailable, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var b [4096]byte
		n, _ := resp.Body.Read(b[:])
		e := protocol.ParseError(resp.StatusCode, b[:n])
		if e.Code == "" {
			// A proxy's page: the hub did not answer.
			return nil, fmt.Errorf("hub client: watch %s: %w: %w", service, ext.ErrDiscoveryUnavailable, e)
		}
		return nil, unavailable(fmt.Errorf("hub client: watch %s: %w", service, e))
	}
	ch := make(chan ext.ServiceEvent, 16)
	go follow(ctx, resp, ch)
	return ch, nil
}

// watchIdle is how long a watch stream may stay silent before the client
// takes it for broken: the hub sends a keep-alive every
// protocol.WatchKeepAlive, so three missed ones mean a hub (or a path to
// it) that is gone without closing the connection. A var for tests.
var watchIdle = 3 * protocol.WatchKeepAlive

// follow turns the SSE stream into events until it ends, or until it
// stays silent for watchIdle.
func follow(ctx context.Context, resp *http.Response, ch chan<- ext.ServiceEvent) {
	defer close(ch)
	defer resp.Body.Close()
	idle := time.AfterFunc(watchIdle, func() { resp.Body.Close() })
	defer idle.Stop()
	send := func(ev ext.ServiceEvent) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		idle.Reset(watchIdle)
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue // event names repeat the data's type; comments are keep-alives
		}
		var we protocol.WatchEvent
		if json.Unmarshal([]byte(strings.TrimSpace(line[5:])), &we) != nil {
			continue
		}
		ev := ext.ServiceEvent{IDs: we.Instances}
		switch we.Type {
		case protocol.WatchInitial:
			ev.Kind = ext.ServiceInitial
		case protocol.WatchAdded:
			ev.Kind = ext.ServiceAdded
		case protocol.WatchRemoved:
			ev.Kind = ext.ServiceRemoved
		default:
			continue
		}
		if !send(ev) {
			return
		}
	}
	if ctx.Err() == nil {
		send(ext.ServiceEvent{Kind: ext.ServiceDisconnected})
	}
}
