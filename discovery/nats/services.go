package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/velo-go/velo/ext"
)

// Defaults of Services.
const (
	// DefaultListQuiet is how long a listing waits for one more answer.
	DefaultListQuiet = 50 * time.Millisecond
	// DefaultServicePoll is how often a watch lists again, which is how it
	// sees an instance that died without saying so.
	DefaultServicePoll = time.Second
)

// Services is service discovery over NATS request/reply, with the
// liveness of Peers: an instance's entry is its subscription, so it lasts
// as long as the registrant's connection. It implements
// ext.ServiceDiscovery, ext.ServiceRegistrar, ext.ServiceLister and
// ext.ServiceWatcher. The caller owns the connection.
type Services struct {
	nc      *nats.Conn
	cluster string
	// ListQuiet ends a listing once no answer came for this long (zero:
	// DefaultListQuiet). Set before use.
	ListQuiet time.Duration
	// PollInterval is how often a watch lists again (zero:
	// DefaultServicePoll). Set before use.
	PollInterval time.Duration

	mu   sync.Mutex
	regs map[serviceKey]*serviceReg
}

type serviceKey struct {
	service string
	id      ext.InstanceID
}

// NewServices uses nc; cluster is the first token of every subject.
func NewServices(nc *nats.Conn, cluster string) *Services {
	return &Services{nc: nc, cluster: cluster, regs: map[serviceKey]*serviceReg{}}
}

// RegisterService answers for id on service's subject until
// UnregisterService or the connection closes; registering twice is no
// error.
func (d *Services) RegisterService(ctx context.Context, service string, id ext.InstanceID) error {
	_, err := d.RegisterServiceInstance(ctx, service, id)
	return err
}

// RegisterServiceInstance is RegisterService with a guard that removes it.
// It returns once the server has the subscriptions, and then announces
// the instance to watches.
func (d *Services) RegisterServiceInstance(ctx context.Context, service string, id ext.InstanceID) (ext.Registration, error) {
	key := serviceKey{service, id}
	d.mu.Lock()
	if r := d.regs[key]; r != nil {
		d.mu.Unlock()
		return r, nil
	}
	d.mu.Unlock()
	r := &serviceReg{d: d, key: key}
	answers := []struct {
		subj string
		body []byte
	}{{ServiceSubject(d.cluster, service), []byte(id.String())}, {ServicesSubject(d.cluster), []byte(service)}}
	for _, a := range answers {
		body := a.body
		sub, err := d.nc.Subscribe(a.subj, func(m *nats.Msg) {
			if m.Reply != "" {
				_ = m.Respond(body) // a lost reply looks like an absent instance for one listing
			}
		})
		if err != nil {
			r.drop(ctx, false)
			return nil, fmt.Errorf("nats services: subscribe %s: %w", a.subj, err)
		}
		r.subs = append(r.subs, sub)
	}
	if err := d.nc.Publish(ServiceEventSubject(d.cluster, service), []byte("+"+id.String())); err != nil {
		r.drop(ctx, false)
		return nil, fmt.Errorf("nats services: announce %s: %w", id, err)
	}
	if err := flush(ctx, d.nc); err != nil {
		r.drop(ctx, false)
		return nil, fmt.Errorf("nats services: register %s in %q: %w", id, service, err)
	}
	d.mu.Lock()
	d.regs[key] = r
	d.mu.Unlock()
	return r, nil
}

// UnregisterService stops answering for id; an unknown one is no error.
func (d *Services) UnregisterService(ctx context.Context, service string, id ext.InstanceID) error {
	d.mu.Lock()
	r := d.regs[serviceKey{service, id}]
	d.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.Unregister(ctx)
}

// ListService asks the service's subject and gathers the answers until
// ListQuiet passes without one, or the server says nobody listens.
func (d *Services) ListService(ctx context.Context, service string) ([]ext.InstanceID, error) {
	var out []ext.InstanceID
	err := d.gather(ctx, ServiceSubject(d.cluster, service), func(b []byte) {
		if id, err := ext.ParseInstanceID(string(b)); err == nil && !slices.Contains(out, id) {
			out = append(out, id)
		}
	})
	return out, err
}

// ListServices asks every registration for its service's name.
func (d *Services) ListServices(ctx context.Context) ([]string, error) {
	var out []string
	err := d.gather(ctx, ServicesSubject(d.cluster), func(b []byte) {
		if s := string(b); !slices.Contains(out, s) {
			out = append(out, s)
		}
	})
	sort.Strings(out)
	return out, err
}

// gather publishes one request on subj and hands each answer to add.
func (d *Services) gather(ctx context.Context, subj string, add func([]byte)) error {
	inbox := d.nc.NewRespInbox()
	sub, err := d.nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("nats services: %s: %w", subj, err)
	}
	defer sub.Unsubscribe()
	if err := d.nc.PublishRequest(subj, inbox, nil); err != nil {
		return fmt.Errorf("nats services: %s: %w", subj, err)
	}
	quiet := d.ListQuiet
	if quiet <= 0 {
		quiet = DefaultListQuiet
	}
	for {
		wait, cancel := context.WithTimeout(ctx, quiet)
		m, err := sub.NextMsgWithContext(wait)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("nats services: %s: %w", subj, ctx.Err())
		case errors.Is(err, context.DeadlineExceeded):
			return nil // quiet: everyone alive has answered
		case errors.Is(err, nats.ErrNoResponders):
			return nil
		case err != nil:
			return fmt.Errorf("nats services: %s: %w", subj, err)
		}
		add(m.Data)
	}
}

// serviceReg is one instance's subscriptions in one service.
type serviceReg struct {
	d    *Services
	key  serviceKey
	once sync.Once
	subs []*nats.Subscription
}

// Unregister drops the subscriptions, tells watches, and waits until the
// server has both, so that a listing after it finds nothing.
func (r *serviceReg) Unregister(ctx context.Context) error {
	var err error
	r.once.Do(func() {
		r.d.mu.Lock()
		if r.d.regs[r.key] == r {
			delete(r.d.regs, r.key)
		}
		r.d.mu.Unlock()
		err = r.drop(ctx, true)
	})
	return err
}

func (r *serviceReg) drop(ctx context.Context, announce bool) error {
	var errs []error
	for _, s := range r.subs {
		errs = append(errs, s.Unsubscribe())
	}
	if r.d.nc.IsClosed() {
		return nil // the server dropped them with the connection
	}
	if announce {
		errs = append(errs, r.d.nc.Publish(ServiceEventSubject(r.d.cluster, r.key.service), []byte("-"+r.key.id.String())))
	}
	errs = append(errs, flush(ctx, r.d.nc))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nats services: unregister %s from %q: %w", r.key.id, r.key.service, err)
	}
	return nil
}

// flush waits until the server has what was sent; nats.go needs a
// deadline for that, so one is added when ctx has none.
func flush(ctx context.Context, nc *nats.Conn) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	return nc.FlushWithContext(ctx)
}
