package etcdstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrOpReadBack: a Put's op id was already read back by ResolveWrite, so
// the write is refused for good. It wraps store.ErrConflict.
var ErrOpReadBack = fmt.Errorf("etcdstore: op id already read back: %w", store.ErrConflict)

func (s *Store) usable() error {
	switch s.cont.Load() {
	case store.Closed:
		return store.ErrClosed
	case store.Fenced:
		return store.ErrFenced
	}
	return nil
}

// Put implements store.Store. An error from etcd answers
// store.ErrIndeterminate: the transaction may have applied.
func (s *Store) Put(ctx context.Context, op store.OpID, rec store.Record, expect store.Incarnation) (store.Incarnation, error) {
	id := rec.Peer.InstanceID
	if id.IsZero() || op.IsZero() {
		return 0, errors.New("etcdstore: Put needs an instance id and an op id")
	}
	if err := s.usable(); err != nil {
		return 0, err
	}
	val, err := encodeValue(op, rec)
	if err != nil {
		return 0, err
	}
	key, tomb := s.keys.instance(id), s.keys.op(op)
	resp, err := s.cli.Txn(ctx).
		If(s.lockHeld(),
			clientv3.Compare(clientv3.ModRevision(key), "=", int64(expect)),
			clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(s.custody))).
		Else(clientv3.OpGet(s.keys.lock), clientv3.OpGet(key, clientv3.WithKeysOnly()), clientv3.OpGet(tomb, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("%w: %v", store.ErrIndeterminate, err)
	}
	rev := resp.Header.Revision
	if !resp.Succeeded {
		err := s.whyRefused(resp, id, expect)
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("%w: %s has no entry, expected %d", store.ErrConflict, id, expect)
		}
		if tombs := resp.Responses[2].GetResponseRange().Kvs; len(tombs) > 0 && !errors.Is(err, store.ErrFenced) {
			err = ErrOpReadBack
		}
		if werr := s.waitApplied(ctx, rev); werr != nil {
			return 0, werr
		}
		return 0, err
	}
	if err := s.waitApplied(ctx, rev); err != nil {
		// Applied, but the hook rule cannot be kept in time: let the
		// caller settle it by op id.
		return 0, fmt.Errorf("%w: applied at %d, watch behind: %v", store.ErrIndeterminate, rev, err)
	}
	return store.Incarnation(rev), nil
}

// whyRefused reads a failed transaction's Else: the lock first (Fenced),
// then the key (ErrNotFound or ErrConflict).
func (s *Store) whyRefused(resp *clientv3.TxnResponse, id ext.InstanceID, expect store.Incarnation) error {
	lock := resp.Responses[0].GetResponseRange().Kvs
	if len(lock) == 0 || lock[0].CreateRevision != s.lockRev {
		s.cont.Set(store.Fenced)
		return store.ErrFenced
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) == 0 {
		if expect == 0 {
			return fmt.Errorf("%w: %s", store.ErrConflict, id)
		}
		return fmt.Errorf("%w: %s", store.ErrNotFound, id)
	}
	return fmt.Errorf("%w: %s is at %d, not %d", store.ErrConflict, id, kvs[0].ModRevision, expect)
}

// Remove implements store.Store. An error from etcd is wrapped in
// store.ErrUnavailable: read the entry to learn whether it applied.
func (s *Store) Remove(ctx context.Context, id ext.InstanceID, inc store.Incarnation) error {
	return s.remove(ctx, id, inc, store.Removed)
}

func (s *Store) remove(ctx context.Context, id ext.InstanceID, inc store.Incarnation, why store.RemovalReason) error {
	if err := s.usable(); err != nil {
		return err
	}
	if inc == 0 {
		return fmt.Errorf("%w: %s", store.ErrNotFound, id)
	}
	s.setReason(int64(inc), why)
	defer s.clearReason(int64(inc))
	key := s.keys.instance(id)
	resp, err := s.cli.Txn(ctx).
		If(s.lockHeld(), clientv3.Compare(clientv3.ModRevision(key), "=", int64(inc))).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(s.keys.lock), clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	var refused error
	if !resp.Succeeded {
		if refused = s.whyRefused(resp, id, inc); errors.Is(refused, store.ErrConflict) && !s.present(resp) {
			refused = fmt.Errorf("%w: %s", store.ErrNotFound, id)
		}
	}
	if err := s.waitApplied(ctx, resp.Header.Revision); err != nil {
		return fmt.Errorf("%w: watch behind: %v", store.ErrUnavailable, err)
	}
	return refused
}

func (s *Store) present(resp *clientv3.TxnResponse) bool {
	return len(resp.Responses[1].GetResponseRange().Kvs) > 0
}

func (s *Store) setReason(inc int64, why store.RemovalReason) {
	s.reasonsMu.Lock()
	s.reasons[inc] = why
	s.reasonsMu.Unlock()
}

func (s *Store) clearReason(inc int64) {
	s.reasonsMu.Lock()
	delete(s.reasons, inc)
	s.reasonsMu.Unlock()
}

// reasonOf says why incarnation inc left: our own Remove or reaper, or
// something we did not do.
func (s *Store) reasonOf(inc int64) store.RemovalReason {
	s.reasonsMu.Lock()
	defer s.reasonsMu.Unlock()
	if why, ok := s.reasons[inc]; ok {
		return why
	}
	return store.Vanished
}

// ResolveWrite implements store.Store. It writes op's tombstone and reads
// the entry in one transaction: from then on the write cannot apply, so
// an answer of false is final.
func (s *Store) ResolveWrite(ctx context.Context, id ext.InstanceID, op store.OpID) (store.Entry, bool, error) {
	if err := s.usable(); err != nil {
		return store.Entry{}, false, err
	}
	key := s.keys.instance(id)
	resp, err := s.cli.Txn(ctx).
		If(s.lockHeld()).
		Then(clientv3.OpPut(s.keys.op(op), "", clientv3.WithLease(s.custody)), clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return store.Entry{}, false, fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	if !resp.Succeeded {
		s.cont.Set(store.Fenced)
		return store.Entry{}, false, store.ErrFenced
	}
	if err := s.waitApplied(ctx, resp.Header.Revision); err != nil {
		return store.Entry{}, false, fmt.Errorf("%w: watch behind: %v", store.ErrUnavailable, err)
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return store.Entry{}, false, nil
	}
	rec, cur, err := decodeValue(kvs[0].Value)
	if err != nil || cur != op {
		return store.Entry{}, false, err
	}
	e, ok := s.Get(id)
	if !ok || e.Incarnation != store.Incarnation(kvs[0].ModRevision) {
		// Removed or replaced between the read and now; the hook heard it.
		return store.Entry{}, false, nil
	}
	e.Record = rec
	return e, true, nil
}

// Touch implements store.Store: it updates the local copy only.
func (s *Store) Touch(id ext.InstanceID, inc store.Incarnation) error {
	it := s.view.Get(id)
	if it == nil {
		return fmt.Errorf("%w: %s", store.ErrNotFound, id)
	}
	if store.Incarnation(it.Inc) != inc {
		return fmt.Errorf("%w: %s is at %d, not %d", store.ErrConflict, id, it.Inc, inc)
	}
	it.Touch(s.nowNanos())
	return nil
}
