package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/velo-go/velo/hub/protocol"
)

// services is the client's side of the hub's service directory, guarded
// by state.mu. want is the client's set (one guard per name); have is
// what the hub holds as far as its answers tell; unsettled names got no
// answer, so the hub may hold either, and the next pass sends them again
// as want says.
type services struct {
	want      map[string]*ServiceGuard
	have      map[string]struct{}
	unsettled map[string]struct{}
}

func (v *services) init() {
	v.want, v.have, v.unsettled = map[string]*ServiceGuard{}, map[string]struct{}{}, map[string]struct{}{}
}

// wanted is the client's set, sorted: what a registration carries.
func (v *services) wanted() []string {
	names := make([]string, 0, len(v.want))
	for n := range v.want {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// sentWith records a registration that carried names: the hub's set is
// exactly those now.
func (v *services) sentWith(names []string) {
	clear(v.have)
	clear(v.unsettled)
	for _, n := range names {
		v.have[n] = struct{}{}
	}
}

// forgetHub: the registration is gone, and the hub's directory went with
// it; the next registration carries the set.
func (v *services) forgetHub() {
	clear(v.have)
	clear(v.unsettled)
}

// next is the first name whose hub state may differ from want.
func (v *services) next() (name string, join, ok bool) {
	var names []string
	for n := range v.want {
		names = append(names, n)
	}
	for n := range v.have {
		names = append(names, n)
	}
	for n := range v.unsettled {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		_, w := v.want[n]
		_, h := v.have[n]
		_, u := v.unsettled[n]
		if w != h || u {
			return n, w, true
		}
	}
	return "", false, false
}

func (v *services) pendingLocked() bool {
	_, _, ok := v.next()
	return ok
}

// ServiceGuard is the client's registration of one service name. Close
// (or Unregister) stops serving the name.
type ServiceGuard struct {
	s    *state
	name string
	once sync.Once
}

// Name is the service name the guard holds.
func (g *ServiceGuard) Name() string { return g.name }

// RegisterService serves name under this client's registration, and
// returns its guard. The client holds one guard per name and refuses a
// second (ErrServiceHeld). The name joins the client's set at once, and
// every registration carries the set; while registered, the change is
// sent now, within ctx. A change that gets no answer is sent again by
// the client's next pass (SyncServices, or the background retry); the
// guard is returned all the same.
func (c *HubClient) RegisterService(ctx context.Context, name string) (*ServiceGuard, error) {
	if err := c.live(); err != nil {
		return nil, err
	}
	return c.s.registerService(ctx, name)
}

func (s *state) registerService(ctx context.Context, name string) (*ServiceGuard, error) {
	if err := protocol.ValidateServiceName(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if _, ok := s.svc.want[name]; ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrServiceHeld, name)
	}
	g := &ServiceGuard{s: s, name: name}
	s.svc.want[name] = g
	s.mu.Unlock()
	if err := s.syncServices(ctx); err != nil {
		s.log.Debug("hub client: service change left for the next pass", "service", name, "err", err)
	}
	return g, nil
}

// Close stops serving the name: it leaves the client's set at once, and
// the change is sent now if the client is registered (else the next
// registration carries the set without it).
func (g *ServiceGuard) Close() error { return g.Unregister(context.Background()) }

// Unregister is Close with a ctx for the request; it is ext.Registration's
// method, so the node's Shutdown withdraws the name this way. A change
// that gets no answer is left for the next pass.
func (g *ServiceGuard) Unregister(ctx context.Context) error {
	var err error
	g.once.Do(func() {
		s := g.s
		s.mu.Lock()
		if s.svc.want[g.name] == g {
			delete(s.svc.want, g.name)
		}
		closed := s.closed
		s.mu.Unlock()
		if !closed {
			err = s.syncServices(ctx)
			if errors.Is(err, ErrNotRegistered) {
				err = nil
			}
		}
	})
	return err
}

// SyncServices sends the service changes the hub has not confirmed, one
// request at a time and never while a registration runs. It answers
// ErrNotRegistered without a registration (the next one carries the
// set), and the first failure, leaving the rest for the next pass.
func (c *HubClient) SyncServices(ctx context.Context) error {
	if err := c.live(); err != nil {
		return err
	}
	return c.s.syncServices(ctx)
}

// syncServices is the one writer of service changes.
func (s *state) syncServices(ctx context.Context) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	for {
		s.mu.Lock()
		if s.closed || s.reg == nil {
			pending := s.svc.pendingLocked()
			s.mu.Unlock()
			if pending {
				return ErrNotRegistered
			}
			return nil
		}
		name, join, ok := s.svc.next()
		if !ok {
			s.mu.Unlock()
			return nil
		}
		cred, id := s.reg.cred, s.peer.InstanceID
		_, wasUnsettled := s.svc.unsettled[name]
		s.svc.unsettled[name] = struct{}{} // until the hub says it applied
		s.mu.Unlock()
		method := "DELETE"
		if join {
			method = "PUT"
		}
		err := s.do(ctx, control, "service "+method+" "+name, method, protocol.ServiceInstancePath(name, id), cred, nil, nil)
		if isNoAnswer(err) {
			return err // unsettled: sent again as want says
		}
		s.mu.Lock()
		if s.reg != nil && s.reg.cred == cred {
			switch {
			case err == nil:
				delete(s.svc.unsettled, name)
				if join {
					s.svc.have[name] = struct{}{}
				} else {
					delete(s.svc.have, name)
				}
			case !wasUnsettled:
				// Refused, or never sent: this request changed nothing.
				delete(s.svc.unsettled, name)
			}
		}
		s.mu.Unlock()
		if err != nil {
			// Answered and refused: the hub's state is unchanged.
			s.settle(err, false)
			return err
		}
	}
}
