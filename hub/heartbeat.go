package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// prober sends one heartbeat to a registrant and returns its answer.
type prober func(ctx context.Context, e store.PeerEntry) (protocol.HeartbeatAnswer, error)

// veloProbe calls the registrant's velo_hub_heartbeat handler.
func (h *Hub) veloProbe(ctx context.Context, e store.PeerEntry) (protocol.HeartbeatAnswer, error) {
	body, err := json.Marshal(protocol.HeartbeatProbe{HubID: h.id, Instance: e.Peer.InstanceID, Epoch: e.Epoch})
	if err != nil {
		return protocol.HeartbeatAnswer{}, err
	}
	resp, err := h.node.Unary(ctx, e.Peer.InstanceID, protocol.HeartbeatHandler, body)
	if err != nil {
		return protocol.HeartbeatAnswer{}, err
	}
	var a protocol.HeartbeatAnswer
	if err := json.Unmarshal(resp, &a); err != nil {
		return protocol.HeartbeatAnswer{}, fmt.Errorf("hub: heartbeat answer: %w", err)
	}
	return a, nil
}

// probeOnce probes e: OK only for an answer with ok: true. A registrant
// answers ok: false while it holds no registration with this hub (its
// registration's answer was lost), and that counts as a failure, or the
// entry nobody can use would live for ever.
func (h *Hub) probeOnce(ctx context.Context, e store.PeerEntry) protocol.ProbeResponse {
	start := time.Now()
	a, err := h.probe(ctx, e)
	res := protocol.ProbeResponse{RTTMicros: time.Since(start).Microseconds()}
	switch {
	case err != nil:
		res.Error = err.Error()
	case !a.OK:
		res.Error = "the instance answered ok: false (it holds no registration with this hub)"
	default:
		res.OK = true
	}
	return res
}

// failCount is the failures in a row of one incarnation.
type failCount struct {
	inc store.Incarnation
	n   int
}

// heartbeat probes every registration each heartbeat_interval_ms, in
// parallel, until loopsStop closes.
func (h *Hub) heartbeat() {
	defer h.loops.Done()
	t := time.NewTicker(h.cfg.heartbeatInterval())
	defer t.Stop()
	failures := map[ext.InstanceID]failCount{}
	for {
		select {
		case <-h.loopsStop:
			return
		case <-t.C:
		}
		h.probeRound(failures)
	}
}

type probeResult struct {
	e  store.PeerEntry
	ok bool
}

// probeRound probes each entry but the hub's own pinned one and the one
// whose registration runs now (its registrant has no answer yet, so it
// cannot tell its new registration from one it never got). Each probe
// times out after one interval.
func (h *Hub) probeRound(failures map[ext.InstanceID]failCount) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.heartbeatInterval())
	defer cancel()
	peers := h.st.Peers()
	results := make(chan probeResult, len(peers))
	var wg sync.WaitGroup
	seen := make(map[ext.InstanceID]struct{}, len(peers))
	for _, e := range peers {
		seen[e.Peer.InstanceID] = struct{}{}
		if e.Pinned || h.registering(e.Peer.InstanceID) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- probeResult{e: e, ok: h.probeOnce(ctx, e).OK}
		}()
	}
	go func() { wg.Wait(); close(results) }()
	for r := range results {
		h.countProbe(failures, r)
	}
	for id := range failures {
		if _, ok := seen[id]; !ok {
			delete(failures, id)
		}
	}
}

// countProbe touches the incarnation on a success and removes it after
// heartbeat_max_failures failures in a row.
func (h *Hub) countProbe(failures map[ext.InstanceID]failCount, r probeResult) {
	id, inc := r.e.Peer.InstanceID, r.e.Incarnation
	if h.registering(id) {
		return // a registration began while the probe ran: not a verdict
	}
	if r.ok {
		delete(failures, id)
		_ = h.st.Touch(id, inc)
		return
	}
	f := failures[id]
	if f.inc != inc {
		f = failCount{inc: inc}
	}
	f.n++
	failures[id] = f
	if f.n < h.cfg.HeartbeatMaxFailures {
		return
	}
	delete(failures, id)
	h.log.Info("hub: removing a registration that failed its heartbeats", "instance", id, "failures", f.n)
	h.removeEntry(id, inc) // the removal hook revokes and queues the delivery
}

// registering: owner's registration transaction runs now.
func (h *Hub) registering(owner ext.InstanceID) bool {
	p := h.inTx.Load()
	return p != nil && *p == owner
}
