package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// Payload is one extension's registration payload: Value is encoded as
// JSON under Name in the registration's extensions.
type Payload struct {
	Name  string
	Value any
}

// Register registers node with the hub. It installs the heartbeat
// handler on node first, so the hub's probes get an answer as soon as
// the hub answers the registration; after it, it registers the hub's
// velo peer with node (again after a hub restart; a failure there is
// logged and the registration kept). A second Register presents the
// credential held, and the hub replaces the registration: a new
// credential and a new epoch. The registration carries the client's
// services (RegisterService) and the payloads given, which later
// automatic re-registrations (a recovery after a hub restart) send again.
func (c *HubClient) Register(ctx context.Context, node *velo.Node, payloads ...Payload) error {
	if err := c.live(); err != nil {
		return err
	}
	if node == nil {
		return errors.New("hub client: register: no node")
	}
	exts, err := encodePayloads(payloads)
	if err != nil {
		return err
	}
	if err := c.s.installHandler(node); err != nil {
		return err
	}
	c.s.mu.Lock()
	c.s.left = false
	c.s.mu.Unlock()
	return c.s.register(ctx, node, node.PeerInfo(), exts)
}

// RegisterPeer registers peer with a hub that runs without velo: no
// heartbeat handler, no hub peer. The client keeps the entry alive with
// the HTTP heartbeat every Config.HeartbeatInterval.
func (c *HubClient) RegisterPeer(ctx context.Context, peer ext.PeerInfo, payloads ...Payload) error {
	if err := c.live(); err != nil {
		return err
	}
	exts, err := encodePayloads(payloads)
	if err != nil {
		return err
	}
	c.s.mu.Lock()
	c.s.httpHB, c.s.left = true, false
	c.s.mu.Unlock()
	return c.s.register(ctx, nil, peer, exts)
}

func encodePayloads(ps []Payload) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for _, p := range ps {
		if p.Name == protocol.ServicesExtension {
			return nil, errors.New("hub client: the services payload is the client's own: use RegisterService")
		}
		if err := protocol.ValidateExtensionName(p.Name); err != nil {
			return nil, err
		}
		b, err := json.Marshal(p.Value)
		if err != nil {
			return nil, fmt.Errorf("hub client: payload %s: %w", p.Name, err)
		}
		out[p.Name] = b
	}
	return out, nil
}

// register runs one registration, with the op token held, and applies
// the fault rules to its outcome.
func (s *state) register(ctx context.Context, node *velo.Node, peer ext.PeerInfo, exts map[string]json.RawMessage) error {
	if err := s.acquire(ctx); err != nil {
		return fmt.Errorf("hub client: register: %w", err)
	}
	defer s.release()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.hasPeer && s.peer.InstanceID != peer.InstanceID {
		s.mu.Unlock()
		return fmt.Errorf("hub client: register: this client holds instance %s; use another client for %s", s.peer.InstanceID, peer.InstanceID)
	}
	s.peer, s.hasPeer, s.payloads = peer, true, exts
	if node != nil {
		s.node = node
	}
	var cred protocol.Credential
	if s.reg != nil {
		cred = s.reg.cred
	}
	names := s.svc.wanted()
	// "Getting one": the handler answers ok from here, and the deferred
	// decrement clears it on every way out, a dropped ctx included.
	s.registering++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.registering--
		s.mu.Unlock()
	}()

	req := protocol.RegisterRequest{Peer: peer, Extensions: map[string]json.RawMessage{}}
	for k, v := range exts {
		req.Extensions[k] = v
	}
	sp, _ := json.Marshal(protocol.ServicesPayload{Names: names})
	req.Extensions[protocol.ServicesExtension] = sp
	var resp protocol.RegisterResponse
	err := s.do(ctx, control, "register", "POST", protocol.PathInstances, cred, req, &resp)
	if err != nil {
		s.registerFailed(err, cred != "")
		return err
	}
	s.registered(resp, names, cred != "")
	return nil
}

// registerFailed applies the rules for a registration that failed.
func (s *state) registerFailed(err error, presented bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch c := code(err); {
	case c == protocol.CodeUnauthorized:
		s.dropLocked("register: unauthorized")
		if !presented {
			// The hub holds a registration of this instance that the
			// client never got: answer not ok until a register succeeds,
			// so that retries cannot keep it alive.
			s.blocked = true
		}
	case c == protocol.CodeRegisterAgain:
		s.dropLocked("register: register_again")
	case c == "" && presented && isNoAnswer(err):
		// Fail closed: the hub may have committed the re-registration and
		// rotated the credential; what it holds is freed by its probes.
		s.dropLocked("register: no answer to a re-registration")
	}
}

// registered takes the registration the hub answered.
func (s *state) registered(resp protocol.RegisterResponse, names []string, presented bool) {
	s.mu.Lock()
	prevHub := protocol.HubID{}
	if s.reg != nil {
		prevHub = s.reg.hubID
	}
	s.reg = &held{cred: resp.Credential, epoch: resp.Epoch, hubID: resp.HubID}
	s.blocked = false
	s.recover = false
	s.rejoin = false
	s.silence.registered(time.Duration(resp.HeartbeatIntervalMS)*time.Millisecond, time.Now())
	s.kickLocked() // the loop arms its silence check for this registration
	if !presented {
		s.recovered = false
	}
	if resp.Recovered || (!prevHub.IsZero() && prevHub != resp.HubID) {
		s.recovered = true
	}
	s.svc.sentWith(names)
	// Guards changed during the call are sent by the loop, which the kick
	// above woke.
	node, needPeer := s.node, resp.HubPeer != nil && s.hubPeerFrom != resp.HubID
	if needPeer {
		s.hubPeerFrom = resp.HubID
	}
	s.mu.Unlock()
	if node != nil && needPeer {
		if err := node.RegisterPeer(*resp.HubPeer); err != nil {
			s.log.Warn("hub client: registering the hub's velo peer failed; the registration is kept", "err", err)
		}
	}
}

// Unregister sends the DELETE that ends the registration. The client
// keeps the registration when the DELETE fails for any reason but the
// hub's unauthorized, register_again or not_found, so a retry (or the
// last Close) sends it again.
func (c *HubClient) Unregister(ctx context.Context) error {
	if err := c.live(); err != nil {
		return err
	}
	return c.s.unregister(ctx)
}

func (s *state) unregister(ctx context.Context) error {
	s.mu.Lock()
	s.rejoin, s.left = false, true // the caller wants out: no automatic register
	s.mu.Unlock()
	if err := s.acquire(ctx); err != nil {
		return fmt.Errorf("hub client: unregister: %w", err)
	}
	defer s.release()
	cred, id, err := s.credential()
	if err != nil {
		return err
	}
	err = s.do(ctx, control, "unregister", "DELETE", protocol.InstancePath(id), cred, nil, nil)
	if err == nil {
		s.mu.Lock()
		s.reg = nil
		s.recovered = false
		s.svc.forgetHub()
		s.mu.Unlock()
		return nil
	}
	s.settle(err, true)
	return err
}
