package fs

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
)

// serviceFile is the file's shape, as the reference writes it:
//
//	{"services":{"<name>":["<uuid>", ...]}}
type serviceFile struct {
	Services map[string][]string `json:"services"`
}

// DefaultPollInterval is how often a watch reads the file again.
const DefaultPollInterval = 2 * time.Second

// Services is service discovery on one JSON file. It implements
// ext.ServiceDiscovery, ext.ServiceRegistrar, ext.ServiceLister and
// ext.ServiceWatcher (by reading the file at once when a stat every
// 100 ms says it changed, and every PollInterval anyway).
type Services struct {
	f jsonFile

	mu   sync.Mutex
	held map[serviceKey]func() // the liveness locks of this process's entries
	// PollInterval is how often a watch reads the whole file even when it
	// did not change, which is how it sees a registrant that died; set it
	// before the first watch. Zero means DefaultPollInterval.
	PollInterval time.Duration
}

// NewServices uses the file at path; it is created on the first registration.
func NewServices(path string) *Services {
	return &Services{f: jsonFile{path: path}, held: map[serviceKey]func(){}}
}

// RegisterService adds id to service; adding it twice is no error. The
// entry lives while this process holds its liveness lock (see the package
// doc): until UnregisterService, or the process's end, however it ends.
func (d *Services) RegisterService(_ context.Context, service string, id ext.InstanceID) error {
	if err := d.hold(service, id); err != nil {
		return err
	}
	var sf serviceFile
	err := d.f.update(&sf, func() error {
		if sf.Services == nil {
			sf.Services = map[string][]string{}
		}
		if !slices.Contains(sf.Services[service], id.String()) {
			sf.Services[service] = append(sf.Services[service], id.String())
		}
		return nil
	})
	if err != nil {
		d.release(service, id)
	}
	return err
}

// UnregisterService removes id from service; a service left empty goes.
func (d *Services) UnregisterService(_ context.Context, service string, id ext.InstanceID) error {
	var sf serviceFile
	err := d.f.update(&sf, func() error {
		removeEntry(&sf, service, id.String())
		return nil
	})
	d.release(service, id)
	return err
}

func removeEntry(sf *serviceFile, service, id string) {
	ids := slices.DeleteFunc(sf.Services[service], func(s string) bool { return s == id })
	if len(ids) == 0 {
		delete(sf.Services, service)
	} else {
		sf.Services[service] = ids
	}
}

// RegisterServiceInstance registers id and returns a guard that removes it.
func (d *Services) RegisterServiceInstance(ctx context.Context, service string, id ext.InstanceID) (ext.Registration, error) {
	if err := d.RegisterService(ctx, service, id); err != nil {
		return nil, err
	}
	return &guard{undo: func(ctx context.Context) error { return d.UnregisterService(ctx, service, id) }}, nil
}

// ListService returns the instances of service; entries that are not
// UUIDs are skipped.
func (d *Services) ListService(_ context.Context, service string) ([]ext.InstanceID, error) {
	sf, err := d.readLive()
	if err != nil {
		return nil, err
	}
	var out []ext.InstanceID
	for _, s := range sf.Services[service] {
		if id, err := ext.ParseInstanceID(s); err == nil {
			out = append(out, id)
		}
	}
	return out, nil
}

// ListServices returns the names of services with at least one instance.
func (d *Services) ListServices(context.Context) ([]string, error) {
	sf, err := d.readLive()
	if err != nil {
		return nil, err
	}
	var out []string
	for name, ids := range sf.Services {
		if len(ids) > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// WatchService reports the instances of service, then each change seen
// when the file is read again. One goroutine per watch, ended by ctx.
func (d *Services) WatchService(ctx context.Context, service string) (<-chan ext.ServiceEvent, error) {
	state := &fileState{path: d.f.path}
	state.changed() // before the listing: a write after it is a change
	first, err := d.ListService(ctx, service)
	if err != nil {
		return nil, err
	}
	every := d.PollInterval
	if every <= 0 {
		every = DefaultPollInterval
	}
	ch := make(chan ext.ServiceEvent, 16)
	ch <- ext.ServiceEvent{Kind: ext.ServiceInitial, IDs: first}
	go d.poll(ctx, service, first, state, every, ch)
	return ch, nil
}

// poll reads the file when a stat says it changed, and every full
// interval anyway: a registrant that died leaves the file as it was, and
// only a full read sees that its liveness lock was dropped.
func (d *Services) poll(ctx context.Context, service string, known []ext.InstanceID, state *fileState, every time.Duration, ch chan<- ext.ServiceEvent) {
	defer close(ch)
	tick := time.NewTicker(checkEvery(every))
	defer tick.Stop()
	lastRead := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !state.changed() && time.Since(lastRead) < every {
			continue
		}
		lastRead = time.Now()
		now, err := d.ListService(ctx, service)
		if err != nil {
			continue // a bad read now says nothing about the next one
		}
		for _, ev := range diff(known, now) {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
		known = now
	}
}

// diff returns Added events for what is new in now, then Removed events
// for what left.
func diff(old, now []ext.InstanceID) []ext.ServiceEvent {
	var out []ext.ServiceEvent
	for _, id := range now {
		if !slices.Contains(old, id) {
			out = append(out, ext.ServiceEvent{Kind: ext.ServiceAdded, IDs: []ext.InstanceID{id}})
		}
	}
	for _, id := range old {
		if !slices.Contains(now, id) {
			out = append(out, ext.ServiceEvent{Kind: ext.ServiceRemoved, IDs: []ext.InstanceID{id}})
		}
	}
	return out
}
