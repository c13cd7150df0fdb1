package etcd

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/velo-go/velo/ext"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RegisterService adds id to service under a lease kept alive until
// UnregisterService.
func (d *Discovery) RegisterService(ctx context.Context, service string, id ext.InstanceID) error {
	_, err := d.RegisterServiceInstance(ctx, service, id)
	return err
}

// RegisterServiceInstance is RegisterService with a guard that revokes
// the lease.
func (d *Discovery) RegisterServiceInstance(ctx context.Context, service string, id ext.InstanceID) (ext.Registration, error) {
	l, err := putLeased(ctx, d.cli, d.ttl, [2]string{serviceKey(d.cluster, service, id), id.String()})
	if err != nil {
		return nil, err
	}
	e := serviceEntry{service, id}
	l.onDrop = func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.services[e] == l {
			delete(d.services, e)
		}
	}
	d.mu.Lock()
	old := d.services[e]
	d.services[e] = l
	d.mu.Unlock()
	if old != nil {
		old.onDrop = nil
		old.stop()
	}
	return l, nil
}

// UnregisterService revokes the lease of a registration made through d.
func (d *Discovery) UnregisterService(ctx context.Context, service string, id ext.InstanceID) error {
	d.mu.Lock()
	l := d.services[serviceEntry{service, id}]
	d.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Unregister(ctx)
}

// ListService returns the instances under the service's prefix.
func (d *Discovery) ListService(ctx context.Context, service string) ([]ext.InstanceID, error) {
	ids, _, err := d.instances(ctx, servicePrefix(d.cluster, service))
	return ids, err
}

func (d *Discovery) instances(ctx context.Context, prefix string) ([]ext.InstanceID, int64, error) {
	resp, err := d.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, fmt.Errorf("etcd discovery: get %s: %w", prefix, err)
	}
	var out []ext.InstanceID
	for _, kv := range resp.Kvs {
		if id, err := ext.ParseInstanceID(strings.TrimPrefix(string(kv.Key), prefix)); err == nil {
			out = append(out, id)
		}
	}
	return out, resp.Header.Revision, nil
}

// ListServices returns the names of services with at least one instance.
func (d *Discovery) ListServices(ctx context.Context) ([]string, error) {
	prefix := servicesPrefix(d.cluster)
	resp, err := d.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcd discovery: get %s: %w", prefix, err)
	}
	seen := map[string]bool{}
	var out []string
	for _, kv := range resp.Kvs {
		name, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if ok && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// WatchService reports the service's instances, then each change, from
// the revision of the first read on, so nothing falls between the two.
// A broken watch ends with ServiceDisconnected.
func (d *Discovery) WatchService(ctx context.Context, service string) (<-chan ext.ServiceEvent, error) {
	prefix := servicePrefix(d.cluster, service)
	first, rev, err := d.instances(ctx, prefix)
	if err != nil {
		return nil, err
	}
	wch := d.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	out := make(chan ext.ServiceEvent, 16)
	out <- ext.ServiceEvent{Kind: ext.ServiceInitial, IDs: first}
	go forwardService(ctx, prefix, wch, out)
	return out, nil
}

func forwardService(ctx context.Context, prefix string, wch clientv3.WatchChan, out chan<- ext.ServiceEvent) {
	defer close(out)
	send := func(ev ext.ServiceEvent) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for resp := range wch {
		if resp.Err() != nil {
			send(ext.ServiceEvent{Kind: ext.ServiceDisconnected})
			return
		}
		for _, ev := range resp.Events {
			id, err := ext.ParseInstanceID(strings.TrimPrefix(string(ev.Kv.Key), prefix))
			if err != nil {
				continue
			}
			kind := ext.ServiceAdded
			if ev.Type == mvccpb.DELETE {
				kind = ext.ServiceRemoved
			}
			if !send(ext.ServiceEvent{Kind: kind, IDs: []ext.InstanceID{id}}) {
				return
			}
		}
	}
	if ctx.Err() == nil {
		send(ext.ServiceEvent{Kind: ext.ServiceDisconnected})
	}
}
