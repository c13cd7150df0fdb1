package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// prober sends one heartbeat to a registrant without waiting for it:
// done runs exactly once with the answer or an error, on whatever
// goroutine completes the call (possibly before prober returns). It must
// honour ctx, which bounds the probe.
type prober func(ctx context.Context, e store.PeerEntry, done func(protocol.HeartbeatAnswer, error))

// veloProbe calls the registrant's velo_hub_heartbeat handler with
// UnaryAsync: no goroutine waits for the answer, so a round over 10,000
// registrants costs response slots, not 10,000 goroutines, and a stopped
// peer delays nobody. done runs on the transport's reader; it only
// decodes a small answer and hands it on.
func (h *Hub) veloProbe(ctx context.Context, e store.PeerEntry, done func(protocol.HeartbeatAnswer, error)) {
	body, err := json.Marshal(protocol.HeartbeatProbe{HubID: h.id, Instance: e.Peer.InstanceID, Epoch: e.Epoch})
	if err != nil {
		done(protocol.HeartbeatAnswer{}, err)
		return
	}
	err = h.node.UnaryAsync(ctx, e.Peer.InstanceID, protocol.HeartbeatHandler, body, func(resp []byte, err error) {
		var a protocol.HeartbeatAnswer
		if err == nil {
			if jerr := json.Unmarshal(resp, &a); jerr != nil {
				err = fmt.Errorf("hub: heartbeat answer: %w", jerr)
			}
		}
		done(a, err)
	})
	if err != nil {
		done(protocol.HeartbeatAnswer{}, err)
	}
}

// probeOutcome is one probe's answer, judged.
type probeOutcome struct {
	res protocol.ProbeResponse
	// verdict is false when the failure is the hub's, not the peer's
	// (no free response slot, the hub's node or loop stopping): such a
	// probe neither touches nor counts.
	verdict bool
}

// judge reads a probe's answer: OK only for ok: true. A registrant
// answers ok: false while it holds no registration with this hub (its
// registration's answer was lost), and that counts as a failure, or the
// entry nobody can use would live for ever.
func judge(start time.Time, a protocol.HeartbeatAnswer, err error) probeOutcome {
	o := probeOutcome{res: protocol.ProbeResponse{RTTMicros: time.Since(start).Microseconds()}, verdict: true}
	switch {
	case errors.Is(err, velo.ErrNoResponseSlot), errors.Is(err, velo.ErrShuttingDown), errors.Is(err, context.Canceled):
		o.res.Error, o.verdict = err.Error(), false
	case err != nil:
		o.res.Error = err.Error()
	case !a.OK:
		o.res.Error = "the instance answered ok: false (it holds no registration with this hub)"
	default:
		o.res.OK = true
	}
	return o
}

// probeOnce probes e and waits for the answer (the on-demand probe
// route).
func (h *Hub) probeOnce(ctx context.Context, e store.PeerEntry) protocol.ProbeResponse {
	start := time.Now()
	ch := make(chan probeOutcome, 1)
	h.probe(ctx, e, func(a protocol.HeartbeatAnswer, err error) { ch <- judge(start, a, err) })
	return (<-ch).res
}

// failCount is the failures in a row of one incarnation.
type failCount struct {
	inc store.Incarnation
	n   int
}

// heartbeat probes every registration each heartbeat_interval_ms, in
// parallel, until loopsStop closes. Stopping cancels the round in
// flight, and what it cancels counts for nobody.
func (h *Hub) heartbeat() {
	defer h.loops.Done()
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.loopsStop:
			cancel()
		case <-base.Done():
		}
	}()
	t := time.NewTicker(h.cfg.heartbeatInterval())
	defer t.Stop()
	failures := map[ext.InstanceID]failCount{}
	for {
		select {
		case <-h.loopsStop:
			return
		case <-t.C:
		}
		h.probeRound(base, failures)
	}
}

type probeResult struct {
	e   store.PeerEntry
	out probeOutcome
}

// probeRound probes each entry but the hub's own pinned one and the one
// whose registration runs now (its registrant has no answer yet, so it
// cannot tell its new registration from one it never got). Every probe
// is sent before any answer is awaited, and each answer is counted as it
// comes, so a stopped peer delays no other; each probe times out after
// one interval.
func (h *Hub) probeRound(base context.Context, failures map[ext.InstanceID]failCount) {
	ctx, cancel := context.WithTimeout(base, h.cfg.heartbeatInterval())
	defer cancel()
	peers := h.st.Peers()
	results := make(chan probeResult, len(peers)) // done never blocks
	seen := make(map[ext.InstanceID]struct{}, len(peers))
	sent := 0
	for _, e := range peers {
		seen[e.Peer.InstanceID] = struct{}{}
		if e.Pinned || h.registering(e.Peer.InstanceID) {
			continue
		}
		sent++
		start := time.Now()
		h.probe(ctx, e, func(a protocol.HeartbeatAnswer, err error) {
			results <- probeResult{e: e, out: judge(start, a, err)}
		})
	}
	for range sent {
		r := <-results
		if base.Err() != nil {
			continue // the hub is stopping: no verdicts
		}
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
	if !r.out.verdict || h.registering(id) {
		return // the hub's own failure, or a registration began as the probe ran: not a verdict
	}
	if r.out.res.OK {
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
