package etcdstore

import (
	"context"
	"time"

	"github.com/velo-go/velo/hub/store"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

var errCompacted = rpctypes.ErrCompacted

// keepLock drains the lock lease's keep-alive answers. The channel closes
// when the lease is gone at etcd (it expired while we were cut off) or at
// Close; the first means another hub may hold the prefix now.
func (s *Store) keepLock(ch <-chan *clientv3.LeaseKeepAliveResponse) {
	defer s.wg.Done()
	for range ch {
	}
	if s.ctx.Err() == nil {
		s.cont.Set(store.Fenced)
	}
}

func (s *Store) drainKeepAlive(ch <-chan *clientv3.LeaseKeepAliveResponse) {
	defer s.wg.Done()
	for range ch {
	}
}

// monitorConn turns the client connection's state into continuity: any
// state but Ready is Degraded (a refused connection shows at once; a
// silent one when gRPC's keep-alive gives up). Back at Ready, the store
// checks its lock and waits until the watch has caught up with etcd before
// it is Live again.
func (s *Store) monitorConn() {
	defer s.wg.Done()
	conn := s.cli.ActiveConnection()
	for {
		st := conn.GetState()
		switch {
		case st == connectivity.Ready && s.cont.Load() == store.Degraded:
			s.recover()
		case st == connectivity.TransientFailure || st == connectivity.Connecting && s.wasReady():
			s.degrade()
		}
		if !conn.WaitForStateChange(s.ctx, st) {
			return
		}
	}
}

// wasReady is true once the store has served: a Connecting at startup is
// not a loss.
func (s *Store) wasReady() bool { return s.applied.Load() > 0 }

// recover checks the lock and the watch after a reconnect.
func (s *Store) recover() {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.keys.lock)
	if err != nil {
		return // still cut off; the next state change retries
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != s.lockRev {
		s.cont.Set(store.Fenced)
		return
	}
	if s.waitApplied(ctx, resp.Header.Revision) == nil && s.cont.Load() == store.Degraded {
		s.cont.Set(store.Live)
	}
}
