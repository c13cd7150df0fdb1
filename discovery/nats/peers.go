package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/velo-go/velo/ext"
)

// DefaultTimeout bounds a lookup whose context has no deadline, as the
// reference's five seconds do.
const DefaultTimeout = 5 * time.Second

// Peers is peer discovery over one NATS connection. It implements
// ext.PeerDiscovery and ext.PeerRegistrar. The caller owns the connection.
type Peers struct {
	nc      *nats.Conn
	cluster string

	mu   sync.Mutex
	regs map[ext.InstanceID]*registration
}

// New uses nc; cluster is the first token of every subject, so clusters
// sharing a NATS server stay apart.
func New(nc *nats.Conn, cluster string) *Peers {
	return &Peers{nc: nc, cluster: cluster, regs: map[ext.InstanceID]*registration{}}
}

// Register answers lookups for self until Unregister or the connection
// closes. It returns once the server has the subscriptions.
func (d *Peers) Register(ctx context.Context, self ext.PeerInfo) error {
	_, err := d.RegisterPeer(ctx, self)
	return err
}

// RegisterPeer is Register with a guard that stops answering.
func (d *Peers) RegisterPeer(ctx context.Context, self ext.PeerInfo) (ext.Registration, error) {
	body := EncodePeerInfo(self)
	answer := func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond(body) // a lost reply looks like a timeout to the asker
		}
	}
	r := &registration{d: d, id: self.InstanceID}
	for _, subj := range []string{InstanceSubject(d.cluster, self.InstanceID), WorkerSubject(d.cluster, self.WorkerID())} {
		sub, err := d.nc.Subscribe(subj, answer)
		if err != nil {
			r.unsubscribe(ctx)
			return nil, fmt.Errorf("nats discovery: subscribe %s: %w", subj, err)
		}
		r.subs = append(r.subs, sub)
	}
	if err := d.flush(ctx); err != nil {
		r.unsubscribe(ctx)
		return nil, fmt.Errorf("nats discovery: register %s: %w", self.InstanceID, err)
	}
	d.mu.Lock()
	old := d.regs[self.InstanceID]
	d.regs[self.InstanceID] = r
	d.mu.Unlock()
	if old != nil {
		old.unsubscribe(ctx)
	}
	return r, nil
}

// Unregister stops answering for id; unknown ids are no error.
func (d *Peers) Unregister(ctx context.Context, id ext.InstanceID) error {
	d.mu.Lock()
	r := d.regs[id]
	d.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.Unregister(ctx)
}

// DiscoverInstance asks the instance's subject.
func (d *Peers) DiscoverInstance(ctx context.Context, id ext.InstanceID) (ext.PeerInfo, error) {
	return d.ask(ctx, InstanceSubject(d.cluster, id))
}

// DiscoverWorker asks the worker's subject.
func (d *Peers) DiscoverWorker(ctx context.Context, w ext.WorkerID) (ext.PeerInfo, error) {
	return d.ask(ctx, WorkerSubject(d.cluster, w))
}

func (d *Peers) ask(ctx context.Context, subj string) (ext.PeerInfo, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	m, err := d.nc.RequestWithContext(ctx, subj, nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return ext.PeerInfo{}, fmt.Errorf("%w: no responder on %s", ext.ErrPeerNotFound, subj)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return ext.PeerInfo{}, fmt.Errorf("%w: no answer on %s: %w", ext.ErrPeerNotFound, subj, err)
	case err != nil:
		return ext.PeerInfo{}, fmt.Errorf("nats discovery: %s: %w", subj, err)
	}
	return DecodePeerInfo(m.Data)
}

// registration is one node's pair of subscriptions.
type registration struct {
	d    *Peers
	id   ext.InstanceID
	once sync.Once
	subs []*nats.Subscription
}

// Unregister drops the subscriptions and waits until the server has
// dropped them too, so a lookup after it finds nothing.
func (r *registration) Unregister(ctx context.Context) error {
	var err error
	r.once.Do(func() {
		r.d.mu.Lock()
		if r.d.regs[r.id] == r {
			delete(r.d.regs, r.id)
		}
		r.d.mu.Unlock()
		err = r.unsubscribe(ctx)
	})
	return err
}

func (r *registration) unsubscribe(ctx context.Context) error {
	var errs []error
	for _, s := range r.subs {
		errs = append(errs, s.Unsubscribe())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nats discovery: unregister %s: %w", r.id, err)
	}
	if r.d.nc.IsClosed() {
		return nil // the server dropped them with the connection
	}
	return r.d.flush(ctx)
}

// flush waits until the server has what was sent; nats.go needs a
// deadline for that, so one is added when ctx has none.
func (d *Peers) flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	return d.nc.FlushWithContext(ctx)
}
