package client

import (
	"context"
	"fmt"

	"github.com/velo-go/velo"
)

// Join is all a node needs to use a hub: it builds a node with opts (at
// least a transport) whose peer and service discovery is the hub at
// hubURL (its control listener), and registers it. The node then
// answers the hub's heartbeats, finds its peers through the hub, and
// calls by service name (velo.Service) resolve through the hub's
// directory, which node.RegisterService writes.
//
// Stop in this order: node.Shutdown (which withdraws the node's
// services), then hc.Close (which unregisters).
func Join(ctx context.Context, hubURL string, opts ...velo.Option) (*velo.Node, *HubClient, error) {
	return JoinWith(ctx, Config{URL: hubURL}, opts...)
}

// JoinWith is Join with a full client Config.
func JoinWith(ctx context.Context, cfg Config, opts ...velo.Option) (*velo.Node, *HubClient, error) {
	hc, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	node, err := velo.New(ctx, append(append([]velo.Option{}, opts...), hc.NodeOptions()...)...)
	if err != nil {
		hc.Close()
		return nil, nil, err
	}
	if err := hc.Register(ctx, node); err != nil {
		node.Shutdown(context.WithoutCancel(ctx))
		hc.Close()
		return nil, nil, fmt.Errorf("hub client: join %s: %w", cfg.URL, err)
	}
	return node, hc, nil
}

// NodeOptions are the options that make the hub a node's discovery:
// velo.WithDiscovery(c.Discovery()) and
// velo.WithServiceDiscovery(c.Services()). Register the node after New.
func (c *HubClient) NodeOptions() []velo.Option {
	return []velo.Option{velo.WithDiscovery(c.Discovery()), velo.WithServiceDiscovery(c.Services())}
}
