package fs

import (
	"context"
	"time"

	"github.com/velo-go/velo/ext"
)

// WatchPeerRemovals reports each instance whose entry leaves the file,
// found by reading the file every PollInterval. One goroutine per watch,
// ended by ctx.
func (d *Peers) WatchPeerRemovals(ctx context.Context) (<-chan ext.InstanceID, error) {
	known, err := d.ids()
	if err != nil {
		return nil, err
	}
	every := d.PollInterval
	if every <= 0 {
		every = DefaultPollInterval
	}
	out := make(chan ext.InstanceID, 16)
	go d.pollRemovals(ctx, known, every, out)
	return out, nil
}

func (d *Peers) pollRemovals(ctx context.Context, known map[ext.InstanceID]bool, every time.Duration, out chan<- ext.InstanceID) {
	defer close(out)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, err := d.ids()
		if err != nil {
			continue // a bad read now says nothing about the next one
		}
		for id := range known {
			if now[id] {
				continue
			}
			select {
			case out <- id:
			case <-ctx.Done():
				return
			}
		}
		known = now
	}
}

// ids returns the instances in the file.
func (d *Peers) ids() (map[ext.InstanceID]bool, error) {
	var pf peerFile
	if err := d.f.read(&pf); err != nil {
		return nil, err
	}
	out := make(map[ext.InstanceID]bool, len(pf.Peers))
	for _, e := range pf.Peers {
		out[e.InstanceID] = true
	}
	return out, nil
}
