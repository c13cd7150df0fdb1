package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leased is one registration: keys put under their own lease, kept alive
// until Unregister revokes it.
type leased struct {
	cli    *clientv3.Client
	id     clientv3.LeaseID
	stop   context.CancelFunc
	done   chan struct{}
	once   sync.Once
	onDrop func() // removes the registration from its owner's table
}

// putLeased grants a lease of ttl seconds, puts kvs under it in one
// transaction and starts the keep-alive.
func putLeased(ctx context.Context, cli *clientv3.Client, ttl int64, kvs ...[2]string) (*leased, error) {
	grant, err := cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("etcd discovery: grant lease: %w", err)
	}
	ops := make([]clientv3.Op, len(kvs))
	for i, kv := range kvs {
		ops[i] = clientv3.OpPut(kv[0], kv[1], clientv3.WithLease(grant.ID))
	}
	if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return nil, fmt.Errorf("etcd discovery: put: %w", err)
	}
	kctx, stop := context.WithCancel(context.Background())
	alive, err := cli.KeepAlive(kctx, grant.ID)
	if err != nil {
		stop()
		cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return nil, fmt.Errorf("etcd discovery: keep alive: %w", err)
	}
	l := &leased{cli: cli, id: grant.ID, stop: stop, done: make(chan struct{})}
	go func() { // the client wants its keep-alive answers read
		defer close(l.done)
		for range alive {
		}
	}()
	return l, nil
}

// Unregister stops the keep-alive and revokes the lease, which deletes
// the keys. A lease that already expired is no error.
func (l *leased) Unregister(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		if l.onDrop != nil {
			l.onDrop()
		}
		l.stop()
		<-l.done
		if l.cli.Ctx().Err() != nil {
			err = fmt.Errorf("etcd discovery: revoke lease %x: client closed; the lease expires on its own", int64(l.id))
			return
		}
		_, err = l.cli.Revoke(ctx, l.id)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("etcd discovery: revoke lease %x: %w", int64(l.id), err)
		}
	})
	return err
}
