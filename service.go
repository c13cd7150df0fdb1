package velo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo/ext"
)

// ErrNoInstance: a call named a service that has no live instance (none
// registered, or every one failed its last call and has not answered
// since). The error's text names the service; test for it with errors.Is.
var ErrNoInstance = errors.New("velo: no live instance of service")

// Service is a call target that names a service instead of an instance:
// the node resolves it through its service discovery (WithServiceDiscovery)
// and its picker chooses one live instance per call.
//
//	resp, err := node.Unary(ctx, velo.Service("llm-worker"), "generate", req)
func Service(name string) ext.ServiceName { return ext.ServiceName(name) }

// Picker chooses among the live instances of a service.
type Picker uint8

const (
	// RoundRobin takes the live instances in turn (the default).
	RoundRobin Picker = iota
	// LeastOutstanding takes the instance with the fewest calls of this
	// node still waiting for an answer; ties go round-robin.
	LeastOutstanding
)

// String names the picker.
func (p Picker) String() string {
	switch p {
	case RoundRobin:
		return "round-robin"
	case LeastOutstanding:
		return "least-outstanding"
	}
	return fmt.Sprintf("Picker(%d)", uint8(p))
}

// Defaults of service resolution.
const (
	// ServiceCacheTTL is how long a listed set of instances is used before
	// it is listed again, for a backend that cannot watch.
	ServiceCacheTTL = time.Second
	// ServiceRetryAfter is how long an instance whose call failed on its
	// connection is skipped before the node asks it, in the background,
	// whether it answers again.
	ServiceRetryAfter = 2 * time.Second
)

// serviceConfig collects the service options of New.
type serviceConfig struct {
	disc   ext.ServiceDiscovery
	picker Picker
}

// WithServiceDiscovery resolves Service targets through d, and is where
// RegisterService publishes this node. Callers reach the instances it
// lists through the node's peer discovery (WithDiscovery), so both
// sides need one that shares a backend.
//
// While d is unavailable (its error matches ext.ErrDiscoveryUnavailable)
// the node goes on calling a service it already knows on the last
// instances d gave, stale but usable and with no age limit, and asks d
// again with a backoff (100 ms doubling to 5 s; a broken watch is opened
// again). An instance that died meanwhile is skipped once a call to it
// fails on its connection; one that joined is seen only when d answers
// again. A service never learned fails with d's error.
func WithServiceDiscovery(d ext.ServiceDiscovery) Option {
	return Option{svc: func(c *serviceConfig) { c.disc = d }}
}

// WithServicePicker chooses how a Service target picks its instance
// (RoundRobin unless set).
func WithServicePicker(p Picker) Option {
	return Option{svc: func(c *serviceConfig) { c.picker = p }}
}

// RegisterService publishes this node as an instance of service in the
// node's service discovery, until Shutdown withdraws it (first thing,
// before the drain, so that callers stop picking it). Callers dial it
// through the PeerInfo that New published in the peer discovery, so the
// node needs WithDiscovery as well as WithServiceDiscovery.
func (n *Node) RegisterService(ctx context.Context, service string) error {
	if n.svc == nil {
		return fmt.Errorf("velo: register service %q: no service discovery (WithServiceDiscovery)", service)
	}
	if !n.publishes {
		return fmt.Errorf("velo: register service %q: no peer discovery (WithDiscovery), so no caller could dial this node", service)
	}
	return n.svc.register(ctx, service, n.InstanceID())
}

// Pick resolves service to one live instance, as a call to Service(name)
// would, without calling it: for work that needs the instance itself,
// such as an anchor its producer must attach to.
func (n *Node) Pick(ctx context.Context, service string) (ext.InstanceID, error) {
	if n.svc == nil {
		return ext.InstanceID{}, fmt.Errorf("velo: pick %q: no service discovery (WithServiceDiscovery)", service)
	}
	id, _, err := n.svc.pick(ctx, service, false)
	return id, err
}

// resolve turns a target into an instance. For a service, finish must be
// called with the call's outcome: it keeps the picker's counts and skips
// an instance whose connection failed.
func (n *Node) resolve(ctx context.Context, t ext.Target) (ext.InstanceID, func(error), error) {
	switch t := t.(type) {
	case ext.InstanceID:
		return t, noFinish, nil
	case ext.ServiceName:
		if n.svc == nil {
			return ext.InstanceID{}, nil, fmt.Errorf("velo: call to service %q: no service discovery (WithServiceDiscovery)", string(t))
		}
		return n.svc.pick(ctx, string(t), true)
	}
	return ext.InstanceID{}, nil, errors.New("velo: call with no target")
}

func noFinish(error) {}

// withdrawServices removes this node's service registrations. Even a
// Shutdown whose ctx is already done (stop at once) tries, for a short
// while, so that callers do not keep picking a node that is gone.
func (n *Node) withdrawServices(ctx context.Context) error {
	if n.svc == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	return n.svc.withdraw(ctx)
}
