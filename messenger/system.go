package messenger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/peerevent"
)

// System handler names.
const (
	helloHandler        = "_hello"
	listHandlersHandler = "_list_handlers"
)

// helloRequest is the body of a _hello request: who the caller is and how
// to reach it. The shape is the reference's HelloRequest
// (lib/velo/src/messenger/server/system_handlers.rs).
type helloRequest struct {
	PeerInfo *ext.PeerInfo `json:"peer_info"`
}

// handlersResponse answers _hello and _list_handlers: the names of every
// handler here, system ones included, as the reference answers.
// InstanceID is this implementation's addition (the reference ignores
// unknown fields): the instance that answered, so a caller finds out when
// a restarted node answers at an old instance's address.
type handlersResponse struct {
	Handlers   []string        `json:"handlers"`
	InstanceID *ext.InstanceID `json:"instance_id,omitempty"`
}

func (m *Messenger) handlersBody() ([]byte, error) {
	id := m.id
	return json.Marshal(handlersResponse{Handlers: m.allHandlers(), InstanceID: &id})
}

// allHandlers lists every registered name, sorted.
func (m *Messenger) allHandlers() []string {
	hs := *m.handlers.Load()
	out := make([]string, 0, len(hs))
	for name := range hs {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func (m *Messenger) registerSystemHandlers() {
	must := func(err error) {
		if err != nil {
			panic("velo: system handler: " + err.Error())
		}
	}
	// _hello registers the caller (so replies can reach it) and answers
	// with this node's handlers.
	must(m.register(UnaryHandler(helloHandler, m.onHello), true))
	must(m.register(UnaryHandler(listHandlersHandler, func(c *Context) ([]byte, error) {
		return m.handlersBody()
	}), true))
	// The proof protocol (identity.go). A proof is taken on the reader
	// before dispatch; its registration only makes the name known. Both
	// pass a drain: a peer's requests may wait on them.
	must(m.register(FireHandler(proveHandler, m.onProve, WithDrainExempt()), true))
	must(m.register(FireHandler(proofHandler, func(*Context) {}, WithDrainExempt()), true))
	// A caller's cancel (handlerctx.go) is a map lookup: it runs on the
	// reader, in order after the request it names, and passes a drain,
	// which it can only shorten.
	must(m.register(FireHandler(cancelHandler, m.onCancel, WithDrainExempt(), WithInline()), true))
}

// onHello registers the caller (so replies can reach it) and answers with
// this node's handlers. Unlike the reference it also checks that the
// instance named in the body is the worker that sent the request.
func (m *Messenger) onHello(c *Context) ([]byte, error) {
	var h helloRequest
	if err := json.Unmarshal(c.Payload, &h); err != nil {
		return nil, fmt.Errorf("bad hello: %w", err)
	}
	if h.PeerInfo == nil {
		return nil, fmt.Errorf("bad hello: no peer_info")
	}
	info := *h.PeerInfo
	if info.WorkerID() != c.SenderWorkerID() {
		return nil, fmt.Errorf("hello from worker %s names instance %s", c.SenderWorkerID(), info.InstanceID)
	}
	p, ok := m.peers.get(info.InstanceID)
	bound := false
	if ok {
		if conflicts(info.Address, p.info.Address) {
			// An instance's endpoints are fixed for its life: a hello that
			// moves one would send this node's replies to whoever wrote it.
			m.countFailure("identity", "hello_moves_address")
			return nil, fmt.Errorf("hello for instance %s names other endpoints than it registered with", info.InstanceID)
		}
		info.Address = withMissing(info.Address, p.info.Address)
	}
	if !ok {
		// First contact: nothing here belongs to this instance yet, and the
		// hello is what introduces it, so the connection it came on speaks
		// for it from now on (the trust the reference gives every peer,
		// given once). Bound before the registration makes the peer one
		// that must prove: its next requests on this connection need no
		// proof and wait for nothing.
		bound = m.bindFirstContact(c.conn, c.sender)
	}
	if !ok || !sameAddress(p.info.Address, info.Address) {
		if err := m.RegisterPeer(info); err != nil {
			return nil, err
		}
		if !ok {
			m.boundLearned(info.InstanceID)
		}
	}
	if bound {
		m.afterFirstContact(c.conn, c.sender)
	}
	m.greet(info.WorkerID())
	return m.handlersBody()
}

// boundLearned counts a peer that a hello introduced against the same
// bound as the peers found through discovery (MaxDiscoveredPeers), so
// that hellos naming ever new instances cannot grow the peer table
// without limit: the least recently used such peer is forgotten.
func (m *Messenger) boundLearned(id ext.InstanceID) {
	if p, ok := m.peers.get(id); ok {
		p.lastUse.Store(time.Now().UnixNano())
		p.discovered.Store(true)
	}
	if victim, ok := m.disco.add(m.peers, id); ok {
		m.countFailure("identity", "peer_table_full")
		m.UnregisterPeer(victim)
		m.greeted.Delete(victim.WorkerID()) // the greeted set stays as bounded as the table
	}
}

// withMissing returns hello's address plus the entries of known that hello
// lacks. A Rust node greets with its messenger's address only: its stream
// listener ("tcp-stream") reaches peers in the PeerInfo registered out of
// band, and a hello must not make this node forget it.
func withMissing(hello, known ext.WorkerAddress) ext.WorkerAddress {
	var out ext.WorkerAddress
	for k, v := range known {
		if _, ok := hello[k]; ok {
			continue
		}
		if out == nil {
			out = make(ext.WorkerAddress, len(hello)+len(known))
			for hk, hv := range hello {
				out[hk] = hv
			}
		}
		out[k] = v
	}
	if out == nil {
		return hello
	}
	return out
}

// conflicts reports whether hello gives another endpoint for a transport
// that known already has.
func conflicts(hello, known ext.WorkerAddress) bool {
	for k, v := range hello {
		if old, ok := known[k]; ok && string(old) != string(v) {
			return true
		}
	}
	return false
}

func sameAddress(a, b ext.WorkerAddress) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

func (p *peer) setHandlers(names []string) {
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[n] = struct{}{}
	}
	p.handlers.Store(&set)
}

func (p *peer) hasHandler(name string) bool {
	h := p.handlers.Load()
	if h == nil {
		return false
	}
	_, ok := (*h)[name]
	return ok
}

// ensureHello runs the handshake with p once; concurrent callers wait for
// the one in flight.
func (m *Messenger) ensureHello(ctx context.Context, p *peer) error {
	if p.helloOK.Load() {
		return nil
	}
	if p.restarted.Load() {
		return fmt.Errorf("%w: %s", ErrPeerRestarted, p.info.InstanceID)
	}
	p.helloMu.Lock()
	if p.helloOK.Load() {
		p.helloMu.Unlock()
		return nil
	}
	if run := p.helloRun; run != nil {
		p.helloMu.Unlock()
		select {
		case <-run.done:
		case <-ctx.Done():
			return ctxErr(ctx)
		}
		if p.helloOK.Load() {
			return nil
		}
		if run.unreachable() {
			// The peer is gone (or going): greeting it again, one waiter
			// after the other, fails the same way, and the last of many
			// waiters would wait for all the others' handshakes.
			return run.err
		}
		return m.ensureHello(ctx, p)
	}
	run := &helloRun{done: make(chan struct{})}
	p.helloRun = run
	p.helloMu.Unlock()
	err := m.hello(ctx, p)
	for try := 0; errors.Is(err, errStaleHello) && try < 3; try++ {
		err = m.hello(ctx, p) // the connection was lost meanwhile: greet again
	}
	run.err = err
	p.helloMu.Lock()
	p.helloRun = nil
	p.helloMu.Unlock()
	close(run.done)
	return err
}

// helloRun is a handshake in flight: done is closed once it ended, with
// err.
type helloRun struct {
	done chan struct{}
	err  error
}

// unreachable says whether the handshake failed because the peer could
// not be reached: what its waiters share rather than try again. A failure
// of the greeter's own context is not theirs, and the error of a remote
// answer is not shared (a caller may name its operation in it).
func (r *helloRun) unreachable() bool {
	var re *msgerr.RemoteError
	return errors.Is(r.err, ErrPeerUnreachable) && !errors.Is(r.err, errStaleHello) && !errors.As(r.err, &re)
}

// errStaleHello: the connection to the peer was lost while the handshake
// ran, so its answer may come from an instance that is gone.
var errStaleHello = fmt.Errorf("%w: the connection was lost during the handshake", ErrPeerUnreachable)

func (m *Messenger) hello(ctx context.Context, p *peer) error {
	m.handshakes.Add(1)
	epoch := p.epoch.Load()
	info := m.PeerInfo()
	body, err := json.Marshal(helloRequest{PeerInfo: &info})
	if err != nil {
		return err
	}
	resp, err := m.Unary(ctx, p.info.InstanceID, helloHandler, body)
	if err != nil {
		return fmt.Errorf("velo: handshake with %s: %w", p.info.InstanceID, msgerr.NameOp(err, "the remote"))
	}
	var h handlersResponse
	if err := json.Unmarshal(resp, &h); err != nil {
		return fmt.Errorf("velo: handshake with %s: %w", p.info.InstanceID, err)
	}
	if h.InstanceID != nil && *h.InstanceID != p.info.InstanceID {
		// Another instance listens at the address: the peer restarted.
		// Nothing more goes to it under the old instance's name.
		p.restarted.Store(true)
		m.callerLost(p.info.WorkerID(), false) // the old instance waits for no answer
		err := fmt.Errorf("%w: %s answers at the address of %s", ErrPeerRestarted, *h.InstanceID, p.info.InstanceID)
		m.slots.failPeer(p.info.WorkerID(), err)
		m.notePeerEvent(peerevent.PeerEvent{Kind: peerevent.PeerRestarted, Instance: p.info.InstanceID, Worker: p.info.WorkerID(), NewInstance: *h.InstanceID, Err: err})
		return err
	}
	p.setHandlers(h.Handlers)
	if p.epoch.Load() != epoch {
		return errStaleHello
	}
	p.helloOK.Store(true)
	m.draining.Delete(p.info.WorkerID()) // a fresh handshake: it is serving again
	m.notePeerEvent(peerevent.PeerEvent{Kind: peerevent.PeerGreeted, Instance: p.info.InstanceID, Worker: p.info.WorkerID()})
	return nil
}

// greet records that worker ran the handshake with this instance. A
// request for a user handler from a worker that did not is refused with
// ErrPeerRestarted: every caller greets an instance before its first such
// request, so one that did not greeted an earlier instance at this address.
func (m *Messenger) greet(w ext.WorkerID) { m.greeted.Store(w, struct{}{}) }

func (m *Messenger) greetedBy(w ext.WorkerID) bool {
	_, ok := m.greeted.Load(w)
	return ok
}

// RemoteHandlers lists the user handlers of a peer, asking it.
func (m *Messenger) RemoteHandlers(ctx context.Context, target ext.InstanceID) ([]string, error) {
	// The remote answers through its peer table, so it must know us first.
	p, err := m.route(ctx, target)
	if err != nil {
		return nil, err
	}
	if err := m.ensureHello(ctx, p); err != nil {
		return nil, err
	}
	resp, err := m.Unary(ctx, target, listHandlersHandler, nil)
	if err != nil {
		return nil, msgerr.NameOp(err, "velo: list handlers")
	}
	var h handlersResponse
	if err := json.Unmarshal(resp, &h); err != nil {
		return nil, fmt.Errorf("velo: list handlers of %s: %w", target, err)
	}
	if p, ok := m.peers.get(target); ok {
		p.setHandlers(h.Handlers)
	}
	// The answer names system handlers too, as the reference's does; the
	// caller wants the ones it can call.
	user := h.Handlers[:0:0]
	for _, n := range h.Handlers {
		if !strings.HasPrefix(n, "_") {
			user = append(user, n)
		}
	}
	return user, nil
}

// WaitForHandler returns once target serves handler, or ctx ends. It uses
// the list from the handshake and asks the peer again only while the
// handler is missing.
func (m *Messenger) WaitForHandler(ctx context.Context, target ext.InstanceID, handler string) error {
	p, err := m.route(ctx, target)
	if err != nil {
		return err
	}
	if err := m.ensureHello(ctx, p); err != nil {
		return err
	}
	backoff := 5 * time.Millisecond
	for !p.hasHandler(handler) {
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctxErr(ctx)
		case <-timer.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
		if _, err := m.RemoteHandlers(ctx, target); err != nil {
			return err
		}
	}
	return nil
}

// handshakeCount is how many handshakes this node started (for tests and reports).
func (m *Messenger) handshakeCount() int64 { return m.handshakes.Load() }
