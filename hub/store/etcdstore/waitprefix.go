package etcdstore

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// WaitForPrefix waits until no store holds prefix's lock: at once after a
// clean Close, or when the lock lease of a hub that crashed expires (up to
// its lock TTL). Then New can take the prefix, unless another hub takes
// it first; New then answers ErrPrefixHeld again.
func WaitForPrefix(ctx context.Context, cli *clientv3.Client, prefix string) error {
	lock := keysOf(prefix).lock
	for {
		resp, err := cli.Get(ctx, lock)
		if err != nil {
			return fmt.Errorf("etcdstore: reading the lock: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		wctx, cancel := context.WithCancel(ctx)
		freed := false
		for wr := range cli.Watch(wctx, lock, clientv3.WithRev(resp.Header.Revision+1)) {
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					freed = true
				}
			}
			if freed || wr.Err() != nil {
				break
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if freed {
			return nil
		}
	}
}
