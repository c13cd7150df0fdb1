package messenger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/velo-go/velo/ext"
)

// System handler names.
const (
	helloHandler        = "_hello"
	listHandlersHandler = "_list_handlers"
)

// helloMsg is the handshake body, both ways: who I am and what I serve.
type helloMsg struct {
	Instance ext.InstanceID `json:"instance"`
	Address  []byte         `json:"address"` // MessagePack WorkerAddress
	Handlers []string       `json:"handlers"`
}

func (m *Messenger) helloBody() ([]byte, error) {
	return json.Marshal(helloMsg{Instance: m.id, Address: m.info.Address.Encode(), Handlers: m.Handlers()})
}

func (m *Messenger) registerSystemHandlers() {
	must := func(err error) {
		if err != nil {
			panic("velo: system handler: " + err.Error())
		}
	}
	// _hello registers the caller (so replies can reach it) and answers
	// with this node's handlers.
	must(m.register(UnaryHandler(helloHandler, func(c *Context) ([]byte, error) {
		var h helloMsg
		if err := json.Unmarshal(c.Payload, &h); err != nil {
			return nil, fmt.Errorf("bad hello: %w", err)
		}
		addr, err := ext.DecodeWorkerAddress(h.Address)
		if err != nil {
			return nil, err
		}
		info := ext.PeerInfo{InstanceID: h.Instance, Address: addr}
		if info.WorkerID() != c.SenderWorkerID() {
			return nil, fmt.Errorf("hello from worker %s names instance %s", c.SenderWorkerID(), h.Instance)
		}
		if p, ok := m.peers.get(h.Instance); !ok || !sameAddress(p.info.Address, addr) {
			if err := m.RegisterPeer(info); err != nil {
				return nil, err
			}
		}
		if p, ok := m.peers.get(h.Instance); ok {
			p.setHandlers(h.Handlers)
		}
		return m.helloBody()
	}), true))
	must(m.register(UnaryHandler(listHandlersHandler, func(c *Context) ([]byte, error) {
		return json.Marshal(m.Handlers())
	}), true))
}

func sameAddress(a, b ext.WorkerAddress) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

func (p *peer) setHandlers(names []string) {
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[n] = struct{}{}
	}
	p.handlers.Store(&set)
	p.helloOK.Store(true)
}

func (p *peer) hasHandler(name string) bool {
	h := p.handlers.Load()
	if h == nil {
		return false
	}
	_, ok := (*h)[name]
	return ok
}

// ensureHello runs the handshake with p once; concurrent callers wait for
// the one in flight.
func (m *Messenger) ensureHello(ctx context.Context, p *peer) error {
	if p.helloOK.Load() {
		return nil
	}
	p.helloMu.Lock()
	if p.helloOK.Load() {
		p.helloMu.Unlock()
		return nil
	}
	if ch := p.helloRun; ch != nil {
		p.helloMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctxErr(ctx)
		}
		if p.helloOK.Load() {
			return nil
		}
		return m.ensureHello(ctx, p)
	}
	ch := make(chan struct{})
	p.helloRun = ch
	p.helloMu.Unlock()
	err := m.hello(ctx, p)
	p.helloMu.Lock()
	p.helloRun = nil
	p.helloMu.Unlock()
	close(ch)
	return err
}

func (m *Messenger) hello(ctx context.Context, p *peer) error {
	m.handshakes.Add(1)
	body, err := m.helloBody()
	if err != nil {
		return err
	}
	resp, err := m.Unary(ctx, p.info.InstanceID, helloHandler, body)
	if err != nil {
		return fmt.Errorf("velo: handshake with %s: %w", p.info.InstanceID, err)
	}
	var h helloMsg
	if err := json.Unmarshal(resp, &h); err != nil {
		return fmt.Errorf("velo: handshake with %s: %w", p.info.InstanceID, err)
	}
	p.setHandlers(h.Handlers)
	return nil
}

// RemoteHandlers lists the handlers of a peer, asking it.
func (m *Messenger) RemoteHandlers(ctx context.Context, target ext.InstanceID) ([]string, error) {
	// The remote answers through its peer table, so it must know us first.
	p, err := m.route(ctx, target)
	if err != nil {
		return nil, err
	}
	if err := m.ensureHello(ctx, p); err != nil {
		return nil, err
	}
	resp, err := m.Unary(ctx, target, listHandlersHandler, nil)
	if err != nil {
		return nil, err
	}
	var names []string
	if err := json.Unmarshal(resp, &names); err != nil {
		return nil, fmt.Errorf("velo: list handlers of %s: %w", target, err)
	}
	if p, ok := m.peers.get(target); ok {
		p.setHandlers(names)
	}
	return names, nil
}

// WaitForHandler returns once target serves handler, or ctx ends. It uses
// the list from the handshake and asks the peer again only while the
// handler is missing.
func (m *Messenger) WaitForHandler(ctx context.Context, target ext.InstanceID, handler string) error {
	p, err := m.route(ctx, target)
	if err != nil {
		return err
	}
	if err := m.ensureHello(ctx, p); err != nil {
		return err
	}
	backoff := 5 * time.Millisecond
	for !p.hasHandler(handler) {
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctxErr(ctx)
		case <-timer.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
		if _, err := m.RemoteHandlers(ctx, target); err != nil {
			return err
		}
	}
	return nil
}

// Handshakes is how many handshakes this node started (for tests and reports).
func (m *Messenger) Handshakes() int64 { return m.handshakes.Load() }
