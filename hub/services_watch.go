package hub

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// watcher is one open watch stream. Its ring (the channel) holds up to
// protocol.WatchBacklog changes; a watcher that falls further behind is
// cut: its set is stale, so it must watch again.
type watcher struct {
	ch  chan protocol.WatchEvent
	cut chan struct{} // closed when the directory drops the watcher
}

// emitLocked sends one change to each watcher of name, cutting those
// whose ring is full. It never blocks: the directory's lock is held.
func (d *directory) emitLocked(name string, s *service, typ protocol.WatchEventType, id ext.InstanceID) {
	for w := range s.watchers {
		select {
		case w.ch <- protocol.WatchEvent{Type: typ, Name: name, Instances: []ext.InstanceID{id}}:
		default:
			delete(s.watchers, w)
			close(w.cut)
		}
	}
}

// subscribe takes the snapshot and subscribes in one step under the
// lock, so the watcher neither misses a change nor sees one twice.
func (d *directory) subscribe(name string) (*watcher, protocol.WatchEvent, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, protocol.WatchEvent{}, false
	}
	s := d.names[name]
	if s == nil {
		s = &service{members: map[ext.InstanceID]struct{}{}, watchers: map[*watcher]struct{}{}}
		d.names[name] = s
	}
	w := &watcher{ch: make(chan protocol.WatchEvent, protocol.WatchBacklog), cut: make(chan struct{})}
	s.watchers[w] = struct{}{}
	return w, protocol.WatchEvent{Type: protocol.WatchInitial, Name: name, Instances: s.sorted()}, true
}

func (d *directory) unsubscribe(name string, w *watcher) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.names[name]
	if s == nil {
		return
	}
	if _, ok := s.watchers[w]; ok {
		delete(s.watchers, w)
		close(w.cut)
	}
	d.gcLocked(name, s)
}

// closeWatches is the directory's shutdown hook: it ends every watch
// stream before the hub drains its listeners, so an open watch does not
// hold the drain.
func (d *directory) closeWatches() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for name, s := range d.names {
		for w := range s.watchers {
			delete(s.watchers, w)
			close(w.cut)
		}
		d.gcLocked(name, s)
	}
}

// handleWatch streams server-sent events: initial, then added and
// removed, with a keep-alive comment on an idle stream.
func (d *directory) handleWatch(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue(protocol.ParamName)
	if err := protocol.ValidateServiceName(name); err != nil {
		protocol.WriteError(w, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		protocol.WriteError(w, protocol.Errorf(protocol.CodeInternal, "streaming is not supported here"))
		return
	}
	wt, initial, ok := d.subscribe(name)
	if !ok {
		protocol.WriteError(w, errStopping)
		return
	}
	defer d.unsubscribe(name, wt)
	// The request is read: a watch lives past the server's ReadTimeout.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", protocol.WatchContentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if writeEvent(w, initial) != nil {
		return
	}
	flusher.Flush()
	keep := time.NewTicker(d.hub.timing.keepAlive)
	defer keep.Stop()
	for {
		select {
		case ev := <-wt.ch:
			if writeEvent(w, ev) != nil {
				return
			}
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case <-wt.cut:
			return
		case <-r.Context().Done():
			return
		}
		flusher.Flush()
	}
}

func writeEvent(w http.ResponseWriter, ev protocol.WatchEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Type, b)
	return err
}
