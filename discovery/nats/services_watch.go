package nats

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/velo-go/velo/ext"
)

// WatchService reports the instances of service, then each change: at
// once for instances that join or leave in order (their announcements),
// and within PollInterval for one whose connection died (the next
// listing lacks it). One goroutine per watch, ended by ctx; a closed
// connection ends it with ServiceDisconnected.
func (d *Services) WatchService(ctx context.Context, service string) (<-chan ext.ServiceEvent, error) {
	events := make(chan *nats.Msg, 64)
	sub, err := d.nc.ChanSubscribe(ServiceEventSubject(d.cluster, service), events)
	if err != nil {
		return nil, fmt.Errorf("nats services: watch %q: %w", service, err)
	}
	if err := flush(ctx, d.nc); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("nats services: watch %q: %w", service, err)
	}
	first, err := d.ListService(ctx, service)
	if err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	out := make(chan ext.ServiceEvent, 16)
	out <- ext.ServiceEvent{Kind: ext.ServiceInitial, IDs: first}
	go d.follow(ctx, service, sub, events, first, out)
	return out, nil
}

// follow turns announcements and periodic listings into events.
func (d *Services) follow(ctx context.Context, service string, sub *nats.Subscription, events <-chan *nats.Msg, known []ext.InstanceID, out chan<- ext.ServiceEvent) {
	defer close(out)
	defer sub.Unsubscribe()
	every := d.PollInterval
	if every <= 0 {
		every = DefaultServicePoll
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	send := func(kind ext.ServiceEventKind, id ext.InstanceID) bool {
		select {
		case out <- ext.ServiceEvent{Kind: kind, IDs: []ext.InstanceID{id}}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		var now []ext.InstanceID
		select {
		case <-ctx.Done():
			return
		case m := <-events:
			now = applyAnnouncement(known, string(m.Data))
		case <-tick.C:
			ids, err := d.ListService(ctx, service)
			if d.nc.IsClosed() {
				select {
				case out <- ext.ServiceEvent{Kind: ext.ServiceDisconnected}:
				case <-ctx.Done():
				}
				return
			}
			if err != nil {
				continue // one failed listing says nothing of the next
			}
			now = ids
		}
		for _, id := range now {
			if !slices.Contains(known, id) && !send(ext.ServiceAdded, id) {
				return
			}
		}
		for _, id := range known {
			if !slices.Contains(now, id) && !send(ext.ServiceRemoved, id) {
				return
			}
		}
		known = now
	}
}

// applyAnnouncement returns known after one "+<id>" or "-<id>".
func applyAnnouncement(known []ext.InstanceID, a string) []ext.InstanceID {
	id, err := ext.ParseInstanceID(strings.TrimLeft(a, "+-"))
	if err != nil || a == "" {
		return known
	}
	now := slices.Clone(known)
	switch a[0] {
	case '+':
		if !slices.Contains(now, id) {
			now = append(now, id)
		}
	case '-':
		now = slices.DeleteFunc(now, func(x ext.InstanceID) bool { return x == id })
	}
	return now
}
