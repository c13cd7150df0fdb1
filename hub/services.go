package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// directory is the built-in services extension, first in the start
// order: which instances serve which names. Its entries follow the
// registration's transaction and removal rules like any extension state,
// so an entry goes when its registration goes and nothing else cleans up.
type directory struct {
	hub    *Hub
	mu     sync.Mutex
	names  map[string]*service
	owners map[ext.InstanceID]*served
	closed bool // the shutdown hook ran: no new watch
}

// service is one name: its members and its watchers.
type service struct {
	members  map[ext.InstanceID]struct{}
	watchers map[*watcher]struct{}
}

// served is what the directory committed for one owner.
type served struct {
	epoch protocol.Epoch
	inc   store.Incarnation
	names map[string]struct{}
}

func newDirectory(h *Hub) *directory {
	return &directory{hub: h, names: map[string]*service{}, owners: map[ext.InstanceID]*served{}}
}

func (d *directory) Name() string       { return protocol.ServicesExtension }
func (d *directory) Requires() []string { return nil }

func (d *directory) Admit(_ ext.InstanceID, payload json.RawMessage) error {
	if payload == nil {
		return nil
	}
	_, err := protocol.DecodeServicesPayload(payload)
	return err
}

// Prepare decodes the payload; it hides nothing, so Abort has nothing to
// undo.
func (d *directory) Prepare(_ context.Context, r *Registration) (Staged, error) {
	s := &dirStage{d: d, keep: r.Payload == nil && r.Renewal}
	if r.Payload != nil {
		p, err := protocol.DecodeServicesPayload(r.Payload)
		if err != nil {
			return nil, err
		}
		s.names = p.Names
	}
	return s, nil
}

func (d *directory) OnRegistered(context.Context, *Registration) {}

// OnRemoved drops the owner's names if they belong to inc or an older
// incarnation.
func (d *directory) OnRemoved(owner ext.InstanceID, inc store.Incarnation) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.owners[owner]
	if s == nil || s.inc > inc {
		return
	}
	for name := range s.names {
		d.leaveLocked(name, owner)
	}
	delete(d.owners, owner)
}

// dirStage sets the owner's names at commit: exactly the payload's; with
// no payload, a renewal keeps what the owner had and any other
// registration starts with none.
type dirStage struct {
	d     *directory
	keep  bool
	names []string
}

func (s *dirStage) Abort() {}

func (s *dirStage) Commit(r *Registration) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.owners[r.Owner]
	next := map[string]struct{}{}
	if s.keep && old != nil {
		next = old.names
	}
	for _, n := range s.names {
		next[n] = struct{}{}
	}
	if old != nil {
		for n := range old.names {
			if _, ok := next[n]; !ok {
				d.leaveLocked(n, r.Owner)
			}
		}
	}
	for n := range next {
		d.joinLocked(n, r.Owner)
	}
	d.owners[r.Owner] = &served{epoch: r.Epoch, inc: r.Incarnation, names: next}
}

func (d *directory) joinLocked(name string, id ext.InstanceID) {
	s := d.names[name]
	if s == nil {
		s = &service{members: map[ext.InstanceID]struct{}{}, watchers: map[*watcher]struct{}{}}
		d.names[name] = s
	}
	if _, ok := s.members[id]; ok {
		return
	}
	s.members[id] = struct{}{}
	d.emitLocked(name, s, protocol.WatchAdded, id)
	d.hub.chg.notify()
}

func (d *directory) leaveLocked(name string, id ext.InstanceID) {
	s := d.names[name]
	if s == nil {
		return
	}
	if _, ok := s.members[id]; !ok {
		return
	}
	delete(s.members, id)
	d.emitLocked(name, s, protocol.WatchRemoved, id)
	d.hub.chg.notify()
	d.gcLocked(name, s)
}

// gcLocked drops a name nobody serves or watches.
func (d *directory) gcLocked(name string, s *service) {
	if len(s.members) == 0 && len(s.watchers) == 0 {
		delete(d.names, name)
	}
}

func (s *service) sorted() []ext.InstanceID {
	ids := make([]ext.InstanceID, 0, len(s.members))
	for id := range s.members {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b ext.InstanceID) int { return slices.Compare(a[:], b[:]) })
	return ids
}

// routes adds the service routes: reads on both listeners, writes on the
// control one.
func (d *directory) routes(mux *http.ServeMux, control bool) {
	mux.HandleFunc(protocol.RouteListServices, d.handleList)
	mux.HandleFunc(protocol.RouteService, d.handleGet)
	mux.HandleFunc(protocol.RouteWatchService, d.handleWatch)
	if control {
		mux.HandleFunc(protocol.RouteServeService, func(w http.ResponseWriter, r *http.Request) { d.handleWrite(w, r, true) })
		mux.HandleFunc(protocol.RouteUnserveService, func(w http.ResponseWriter, r *http.Request) { d.handleWrite(w, r, false) })
	}
}

func (d *directory) handleList(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	out := protocol.ServiceList{Services: []string{}}
	for name, s := range d.names {
		if len(s.members) > 0 {
			out.Services = append(out.Services, name)
		}
	}
	d.mu.Unlock()
	slices.Sort(out.Services)
	writeJSON(w, http.StatusOK, out)
}

func (d *directory) handleGet(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue(protocol.ParamName)
	if err := protocol.ValidateServiceName(name); err != nil {
		protocol.WriteError(w, err)
		return
	}
	out := protocol.ServiceInstances{Name: name, Instances: []ext.InstanceID{}}
	d.mu.Lock()
	if s := d.names[name]; s != nil {
		out.Instances = s.sorted()
	}
	d.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// handleWrite serves PUT (join) and DELETE (leave) under the instance's
// credential. It applies only if the lease's epoch is the one the
// directory committed for the owner, checked under the directory's lock
// in the same critical section as the change: a registration that began
// after Authorize answered cannot be overwritten by this request.
func (d *directory) handleWrite(w http.ResponseWriter, r *http.Request, join bool) {
	if _, err := d.hub.readBody(r, protocol.MaxSmallBody); err != nil {
		protocol.WriteError(w, err)
		return
	}
	name := r.PathValue(protocol.ParamName)
	if err := protocol.ValidateServiceName(name); err != nil {
		protocol.WriteError(w, err)
		return
	}
	owner, lease, err := d.hub.authorized(r)
	if err != nil {
		protocol.WriteError(w, err)
		return
	}
	d.mu.Lock()
	s := d.owners[owner]
	if s == nil || s.epoch != lease.Epoch {
		d.mu.Unlock()
		protocol.WriteError(w, protocol.Errorf(protocol.CodeUnauthorized, "the credential's registration is no longer the committed one"))
		return
	}
	if join {
		s.names[name] = struct{}{}
		d.joinLocked(name, owner)
	} else {
		delete(s.names, name)
		d.leaveLocked(name, owner)
	}
	d.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
