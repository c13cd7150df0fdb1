package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub/protocol"
)

// installHandler puts the velo_hub_heartbeat handler on node, once. The
// handler refers to the client's shared state; after the last Close it
// answers not ok.
func (s *state) installHandler(node *velo.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handlerOn == node {
		return nil
	}
	if s.handlerOn != nil {
		return errors.New("hub client: register: this client is bound to another node")
	}
	err := node.Register(velo.UnaryHandler(protocol.HeartbeatHandler, func(c *velo.Context) ([]byte, error) {
		var p protocol.HeartbeatProbe
		if err := json.Unmarshal(c.Payload, &p); err != nil {
			return nil, fmt.Errorf("hub client: heartbeat probe: %w", err)
		}
		return json.Marshal(s.answer(p))
	}))
	if err != nil {
		return fmt.Errorf("hub client: installing the heartbeat handler: %w", err)
	}
	s.handlerOn = node
	return nil
}

// answer is the heartbeat rule: ok only while the client holds a
// registration or is getting one, and never while blocked (a register
// without a credential was refused unauthorized). A probe from another
// hub id than the one that gave the registration means that hub
// restarted on a persistent store: the registration can still recover
// its reserved entry, so the answer is ok, and the client registers
// again presenting the credential.
func (s *state) answer(p protocol.HeartbeatProbe) protocol.HeartbeatAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a protocol.HeartbeatAnswer
	if s.closed || s.blocked || !s.hasPeer || (!p.Instance.IsZero() && p.Instance != s.peer.InstanceID) {
		return a
	}
	s.silence.heard(time.Now())
	if s.reg != nil {
		a.HubID = s.reg.hubID
	}
	switch {
	case s.registering > 0:
		a.OK = true
	case s.reg == nil:
	case !p.HubID.IsZero() && p.HubID != s.reg.hubID:
		a.OK = true
		if !s.recovered || !s.recover {
			s.recovered, s.recover = true, true
			s.kickLocked()
		}
	default:
		// The entry the hub probes must be the one held: a probe of
		// another epoch is for a registration whose answer was lost.
		a.OK = p.Epoch == 0 || p.Epoch == s.reg.epoch
	}
	return a
}

// heartbeatHTTP sends one HTTP heartbeat (RegisterPeer mode, or a check
// after the hub's probes fell silent) and applies what it answers. An
// answer that the hub does not hold this registration (not_found,
// unauthorized, register_again) drops it and has the loop register again
// from scratch: the registrant is alive and wants to be known, and a hub
// that restarted on an empty store, or expired the entry, has nothing to
// recover.
func (s *state) heartbeatHTTP(ctx context.Context) error {
	cred, id, err := s.credential()
	if err != nil {
		return err
	}
	var resp protocol.HeartbeatResponse
	err = s.do(ctx, control, "heartbeat", "POST", protocol.HeartbeatPath(id), cred, nil, &resp)
	if err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		// A registration that replaced the one this heartbeat presented
		// is not what the answer is about.
		if s.reg == nil || s.reg.cred != cred {
			return err
		}
		s.settleLocked(err, true)
		if s.reg == nil && !s.closed && !s.left {
			s.rejoin = true
			s.kickLocked()
		}
		return err
	}
	s.mu.Lock()
	if s.reg != nil && s.reg.cred == cred && !resp.HubID.IsZero() && resp.HubID != s.reg.hubID {
		s.recovered, s.recover = true, true
		s.kickLocked()
	}
	s.mu.Unlock()
	return nil
}
