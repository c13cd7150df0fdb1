package etcd

import (
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultLeaseTTL is the lease of a registration unless WithLeaseTTL sets
// another, as in the reference.
const DefaultLeaseTTL = 30 * time.Second

// Discovery is peer and service discovery on etcd. It implements
// ext.PeerDiscovery, ext.PeerRegistrar, ext.PeerWatcher,
// ext.ServiceDiscovery, ext.ServiceRegistrar, ext.ServiceLister and
// ext.ServiceWatcher. The caller owns the client.
type Discovery struct {
	cli     *clientv3.Client
	cluster string
	ttl     int64 // seconds

	mu       sync.Mutex
	peers    map[ext.InstanceID]*leased
	services map[serviceEntry]*leased
}

type serviceEntry struct {
	name string
	id   ext.InstanceID
}

// Option configures New.
type Option struct{ apply func(*Discovery) }

// WithLeaseTTL sets the lease of each registration, rounded up to whole
// seconds (at least one). A dead process's keys last this long; the
// keep-alive renews the lease every third of it.
func WithLeaseTTL(d time.Duration) Option {
	return Option{apply: func(x *Discovery) { x.ttl = max(1, int64((d+time.Second-1)/time.Second)) }}
}

// New uses cli; cluster is the second segment of every key, so clusters
// sharing an etcd stay apart.
func New(cli *clientv3.Client, cluster string, opts ...Option) *Discovery {
	d := &Discovery{
		cli: cli, cluster: cluster, ttl: int64(DefaultLeaseTTL / time.Second),
		peers: map[ext.InstanceID]*leased{}, services: map[serviceEntry]*leased{},
	}
	for _, o := range opts {
		o.apply(d)
	}
	return d
}

// LeaseTTL is the lease each registration gets.
func (d *Discovery) LeaseTTL() time.Duration { return time.Duration(d.ttl) * time.Second }
