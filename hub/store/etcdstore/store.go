package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/internal/localview"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrPrefixHeld: another store holds the prefix's lock. It wraps
// store.ErrFenced.
var ErrPrefixHeld = fmt.Errorf("etcdstore: prefix held by another hub: %w", store.ErrFenced)

// Store is a hub store on etcd. Build it with New.
type Store struct {
	cli  *clientv3.Client
	cfg  config
	keys keys

	lockLease, custody clientv3.LeaseID
	lockRev            int64 // CreateRevision of our lock key

	view *localview.View[store.Record]
	cont store.ContinuitySignal

	// mu is held by the watch while it applies events and by
	// InstallRemovalHook, so the snapshot and the hook share a point.
	mu   sync.Mutex
	hook store.RemovalHook

	applied   atomic.Int64 // the revision the local copy reflects
	appliedMu sync.Mutex
	appliedCh chan struct{} // closed when applied grows

	reasonsMu sync.Mutex
	reasons   map[int64]store.RemovalReason // incarnation -> why our own delete removes it

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	reaper chan struct{} // closed to start the reaper
	closed atomic.Bool
	once   sync.Once
}

var _ store.Store = (*Store)(nil)
var _ store.Reaper = (*Store)(nil)

// New opens the prefix: it takes the lock (ErrPrefixHeld when another
// store holds it), moves entries left by an earlier hub onto its custody
// lease, loads the local copy and starts the watch. The client stays the
// caller's; Close does not close it.
func New(ctx context.Context, cli *clientv3.Client, opts ...Option) (*Store, error) {
	cfg := defaults()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.ttl <= 0 || cfg.lockTTL < 1e9 || cfg.custodyTTL < 1e9 || cfg.reapEvery < 0 || cfg.now == nil || cfg.prefix == "" {
		return nil, errors.New("etcdstore: TTLs must be positive (leases at least 1 s), the prefix and clock set")
	}
	if cfg.reapEvery == 0 {
		cfg.reapEvery = cfg.ttl / 10
	}
	s := &Store{
		cli: cli, cfg: cfg, keys: keysOf(cfg.prefix), view: localview.New[store.Record](),
		appliedCh: make(chan struct{}), reasons: map[int64]store.RemovalReason{}, reaper: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.open(ctx); err != nil {
		s.cancel()
		s.releaseLock()
		return nil, err
	}
	return s, nil
}

func (s *Store) open(ctx context.Context) error {
	if err := s.takeLock(ctx); err != nil {
		return err
	}
	c, err := s.cli.Grant(ctx, int64(s.cfg.custodyTTL.Seconds()))
	if err != nil {
		return fmt.Errorf("etcdstore: custody lease: %w", err)
	}
	s.custody = c.ID
	if err := s.adopt(ctx); err != nil {
		return err
	}
	rev, err := s.load(ctx)
	if err != nil {
		return err
	}
	lockKA, err := s.cli.KeepAlive(s.ctx, s.lockLease)
	if err != nil {
		return fmt.Errorf("etcdstore: lock keep-alive: %w", err)
	}
	custKA, err := s.cli.KeepAlive(s.ctx, s.custody)
	if err != nil {
		return fmt.Errorf("etcdstore: custody keep-alive: %w", err)
	}
	s.wg.Add(4)
	go s.watchLoop(rev)
	go s.keepLock(lockKA)
	go s.drainKeepAlive(custKA)
	go s.monitorConn()
	return nil
}

// takeLock puts the lock key on a fresh lease if nobody holds it.
func (s *Store) takeLock(ctx context.Context) error {
	l, err := s.cli.Grant(ctx, int64(s.cfg.lockTTL.Seconds()))
	if err != nil {
		return fmt.Errorf("etcdstore: lock lease: %w", err)
	}
	s.lockLease = l.ID
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.keys.lock), "=", 0)).
		Then(clientv3.OpPut(s.keys.lock, fmt.Sprintf("%x", int64(l.ID)), clientv3.WithLease(l.ID))).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: taking the lock: %w", err)
	}
	if !resp.Succeeded {
		return ErrPrefixHeld
	}
	s.lockRev = resp.Header.Revision
	return nil
}

// lockHeld is the condition every transaction of the store carries.
func (s *Store) lockHeld() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.keys.lock), "=", s.lockRev)
}

// adopt moves every entry that is not on our custody lease onto it, so
// the entries of a hub that crashed outlive that hub's lease.
func (s *Store) adopt(ctx context.Context) error {
	resp, err := s.cli.Get(ctx, s.keys.instances, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("etcdstore: loading: %w", err)
	}
	for _, kv := range resp.Kvs {
		if clientv3.LeaseID(kv.Lease) == s.custody {
			continue
		}
		_, err := s.cli.Txn(ctx).
			If(s.lockHeld(), clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpPut(string(kv.Key), string(kv.Value), clientv3.WithLease(s.custody))).
			Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: adopting %s: %w", kv.Key, err)
		}
	}
	return nil
}

// load fills the local copy from one read of the prefix and answers its
// revision. Entries that do not decode are skipped: the store did not
// write them.
func (s *Store) load(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.keys.instances, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcdstore: loading: %w", err)
	}
	now := s.nowNanos()
	for _, kv := range resp.Kvs {
		if it := s.itemOf(kv.Key, kv.Value, kv.ModRevision, now); it != nil {
			s.view.Set(it)
		}
	}
	s.setApplied(resp.Header.Revision)
	return resp.Header.Revision, nil
}

func (s *Store) itemOf(key, val []byte, rev, now int64) *localview.Item[store.Record] {
	id, ok := s.keys.idOf(key)
	if !ok {
		return nil
	}
	rec, op, err := decodeValue(val)
	if err != nil || rec.Peer.InstanceID != id {
		return nil
	}
	return localview.NewItem(id, uint64(rev), op, rec.Pinned, rec, now)
}

func (s *Store) nowNanos() int64 { return s.cfg.now().UnixNano() }

// Close stops the watch, the keep-alives and the reaper, and frees the
// lock so the next hub can take the prefix at once. The entries stay, on
// the custody lease, for the next hub to recover.
func (s *Store) Close(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		s.closed.Store(true)
		s.cancel()
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		s.cont.Set(store.Closed)
		if rerr := s.releaseLockCtx(ctx); err == nil {
			err = rerr
		}
	})
	return err
}

func (s *Store) releaseLock() { _ = s.releaseLockCtx(context.Background()) }

// releaseLockCtx revokes the lock lease, which deletes the lock key.
func (s *Store) releaseLockCtx(ctx context.Context) error {
	if s.lockLease == 0 {
		return nil
	}
	if _, err := s.cli.Revoke(ctx, s.lockLease); err != nil {
		return fmt.Errorf("etcdstore: freeing the lock: %w", err)
	}
	return nil
}

// Continuity implements store.Store.
func (s *Store) Continuity() store.Continuity { return s.cont.Load() }

// ContinuityWatch implements store.Store.
func (s *Store) ContinuityWatch() (store.Continuity, <-chan struct{}) { return s.cont.Watch() }

// Prefix is the store's key prefix.
func (s *Store) Prefix() string { return s.cfg.prefix }
