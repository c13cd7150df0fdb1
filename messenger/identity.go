package messenger

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgwire"
)

// Who sent a request: the identity bound to its connection.
//
// A request's header names its sender (the worker id in the response id),
// and anyone who can reach the port can write any header. So the node binds
// each inbound connection to the one worker it speaks for, and believes a
// claim only when the connection has proved it:
//
//   - The first request on a connection names the worker the connection
//     speaks for. A later request on it that names another worker is
//     refused.
//   - A Go node marks its address with ProofKey. When a connection speaks
//     for such a peer, this node holds the connection's requests and sends
//     the peer a challenge (_velo_prove: the connection's id and a random
//     nonce) over its own route to the peer's registered address. Only the
//     real peer receives it; it answers with _velo_proof, carrying the same
//     bytes, on each of its lanes to this node. The proof that arrives on
//     the connection itself binds it; the held requests then run, in order.
//     A connection that does not prove itself within ProofTimeout has its
//     held requests refused with ErrIdentityUnproven, and later ones
//     dropped (counted, never answered: an answer goes to the peer the
//     request named, so answering a stranger's flood would make this node
//     write to that peer on the stranger's behalf).
//   - A peer whose address lacks the mark (a Rust 0.9 node, which cannot
//     answer) or that this node does not know is trusted as it claims, as
//     the reference trusts every peer. A stranger can pose as such a peer;
//     only TLS, which authenticates the connection itself, closes that.
//   - A transport that does not stamp frames with their connection
//     (Frame.Conn == 0) gets the reference's trust too.
//
// The challenge and the proof themselves pass unchecked: a challenge only
// makes this node write to a peer it already knows, at that peer's
// registered address, and a proof binds nothing unless it carries the
// nonce sent for the connection it arrives on.

// Handlers of the proof protocol (Go-defined; see docs/wire.md).
const (
	proveHandler = "_velo_prove"
	proofHandler = "_velo_proof"
)

// proofTimeout, when set, replaces ProofTimeout (tests shorten it).
var proofTimeout atomic.Int64

func proofWait() time.Duration {
	if d := proofTimeout.Load(); d > 0 {
		return time.Duration(d)
	}
	return msgwire.ProofTimeout
}

// Bounds on what a connection that has not proved itself may cost.
const (
	maxHeldFrames = 2048
	maxHeldBytes  = 512 << 10 // copied bytes plus heldOverhead per request; a first request may be larger
	// maxProving is how many connections may wait for one worker's proof
	// at once: a stranger opening connections in its name cannot make this
	// node challenge the real peer without bound.
	maxProving = 64
	// maxOverAnswers is how many requests past the hold's bound a
	// connection gets answered.
	maxOverAnswers = 256
)

const proofBodyLen = 8 + 16 // [u64 BE connection id][16-byte nonce]

type connPhase uint8

const (
	connTrusted connPhase = iota // the claimed peer cannot prove: the reference's trust
	connProving                  // a challenge is out; requests wait in held
	connProven                   // the claimed peer proved the connection is its own
	connRefused                  // it did not prove it in time, or claimed two workers
)

// connState is what the node knows of one inbound connection.
type connState struct {
	id      ext.ConnID
	claimed ext.WorkerID // the worker its first request named

	// proven is set once, with phase, when the proof binds the connection:
	// the hot path reads it without the lock.
	proven atomic.Bool

	mu        sync.Mutex
	phase     connPhase
	nonce     [16]byte
	held      []heldReq
	heldBytes int
	// overAnswered counts the requests past the hold's bound that were
	// answered (maxOverAnswers); later ones are only dropped, so a
	// stranger's flood cannot make this node write to the peer it names
	// without bound.
	overAnswered int
	timer        *time.Timer
}

// identityGate holds the state of every inbound connection that carried a
// request.
type identityGate struct {
	mu      sync.Mutex
	conns   map[ext.ConnID]*connState
	proving map[ext.WorkerID]int

	challenged, proven, refused, mismatched, held atomic.Int64
}

// gateStats counts what the identity gate did (see identity.go).
type gateStats struct {
	Challenged int64 // challenges sent for connections
	Proven     int64 // connections bound by a proof
	Refused    int64 // requests refused: unproven, over a bound, or a second identity
	Mismatched int64 // requests that named another worker than their connection's
	Held       int64 // requests that waited for a proof
	Conns      int   // connections tracked now
}

// identityStats reports the identity gate's counters.
func (m *Messenger) identityStats() gateStats {
	g := &m.gate
	g.mu.Lock()
	n := len(g.conns)
	g.mu.Unlock()
	return gateStats{
		Challenged: g.challenged.Load(), Proven: g.proven.Load(), Refused: g.refused.Load(),
		Mismatched: g.mismatched.Load(), Held: g.held.Load(), Conns: n,
	}
}

// gateVerdict is what the gate does with one request.
type gateVerdict uint8

const (
	gatePass   gateVerdict = iota
	gateHeld               // the gate keeps the job until the proof or the timeout
	gateDrop               // dropped and counted, never answered: see refuseHeld
	gateRefuse             // answered with ErrIdentityUnproven (a few per connection)
)

// connFor returns the state of conn, made on first use for claimed.
func (g *identityGate) connFor(conn ext.ConnID, claimed ext.WorkerID) *connState {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conns == nil {
		g.conns, g.proving = map[ext.ConnID]*connState{}, map[ext.WorkerID]int{}
	}
	cs := g.conns[conn]
	if cs == nil {
		cs = &connState{id: conn, claimed: claimed}
		g.conns[conn] = cs
	}
	return cs
}

// proves reports whether w is a known peer that answers challenges.
func (m *Messenger) proves(w ext.WorkerID) bool {
	p, ok := m.peers.getWorker(w)
	return ok && p.proves
}

// admit decides what happens to request j. cs caches the connection's
// state across the requests of one read (they share a connection).
func (m *Messenger) admit(j *job, cs **connState) gateVerdict {
	conn := j.conn
	sender := j.hdr.id.Worker()
	if sender == m.wid {
		// Only the loopback speaks for this node (loopback.go): a request
		// from anywhere else that claims to be its own is forged.
		if conn == m.selfConn {
			return gatePass
		}
		m.gate.mismatched.Add(1)
		m.countFailure("identity", "claims_own_identity")
		return gateDrop
	}
	if conn == 0 {
		return gatePass
	}
	c := *cs
	if c == nil || c.id != conn {
		c = m.gate.connFor(conn, sender)
		*cs = c
	}
	if c.claimed != sender {
		m.gate.mismatched.Add(1)
		m.countFailure("identity", "second_identity")
		return gateDrop
	}
	if c.proven.Load() {
		return gatePass
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.phase {
	case connProven:
		return gatePass
	case connRefused:
		// Its held requests were answered; answering every later one
		// would let a stranger make this node write to the peer it named.
		m.gate.refused.Add(1)
		m.countFailure("identity", "refused_connection")
		return gateDrop
	case connTrusted:
		// A peer may become known as a prover after the connection's first
		// request (its hello registered it): from then on it proves.
		if !m.proves(sender) {
			return gatePass
		}
		if !m.challengeLocked(c) {
			c.phase = connRefused
			m.gate.refused.Add(1)
			return gateDrop
		}
	}
	// connProving
	size := j.len() + heldOverhead
	if len(c.held) > 0 && (len(c.held) >= maxHeldFrames || c.heldBytes+size > maxHeldBytes) {
		m.countFailure("identity", "held_over_bound")
		if m.holdWarn.allow() {
			// A fire-and-forget request refused here has no one to tell:
			// say so, rather than lose it without a word. A burst of mux
			// batches on a new lane is the usual one (docs/faults.md).
			m.logger().Warn("velo: a connection still proving its identity outgrew its hold; requests past it are refused, and fire-and-forget ones are lost",
				"sender", sender, "handler", string(j.hdr.handler), "held", len(c.held), "held_bytes", c.heldBytes,
				"metric", `velo_messenger_dispatch_failures_total{reason="held_over_bound"}`)
		}
		if c.overAnswered < maxOverAnswers {
			// A real peer's burst on a new connection can outgrow the
			// hold: its callers hear why at once, not at their deadline.
			c.overAnswered++
			return gateRefuse
		}
		m.gate.refused.Add(1)
		return gateDrop
	}
	c.held = append(c.held, detach(j))
	c.heldBytes += size
	m.gate.held.Add(1)
	return gateHeld
}

// heldReq is a request held for its connection's proof, kept small: its
// bytes, copied out of the read buffer (which it gives back, so a held
// request does not pin the chunk of the read it came in, which may hold
// many more), and its in-flight guard.
type heldReq struct {
	buf   []byte // header, then payload
	hlen  int
	guard ext.InFlightGuard
	conn  ext.ConnID
	dl    time.Time // the caller's deadline, read on arrival
}

// heldOverhead is what a held request costs beyond its bytes, counted
// against maxHeldBytes.
const heldOverhead = 64

func detach(j *job) heldReq {
	h := &j.hdr
	buf := make([]byte, 0, j.len())
	buf = appendRequestHeader(buf, h.rtype, h.id, string(h.handler), h.headers) // the header as it came (requestHeader.len)
	hlen := len(buf)
	buf = append(buf, j.payload...)
	if j.owner != nil {
		j.owner.Release()
	}
	return heldReq{buf: buf, hlen: hlen, guard: j.guard, conn: j.conn, dl: j.dl}
}

// job rebuilds the request. Its header parsed before it was held, so it
// parses again over the copy.
func (h heldReq) job() (job, bool) {
	hdr, err := parseRequestHeader(h.buf[:h.hlen:h.hlen])
	if err != nil {
		h.guard.Release()
		return job{}, false
	}
	return job{payload: h.buf[h.hlen:], guard: h.guard, conn: h.conn, hdr: hdr, dl: h.dl}, true
}

// jobs rebuilds held requests, in order.
func jobs(held []heldReq) []job {
	out := make([]job, 0, len(held))
	for _, h := range held {
		if j, ok := h.job(); ok {
			out = append(out, j)
		}
	}
	return out
}

// challengeLocked moves c to proving and sends its peer the challenge. It
// reports false when c may not wait for a proof (too many connections wait
// in that worker's name, or the challenge could not be sent).
func (m *Messenger) challengeLocked(c *connState) bool {
	g := &m.gate
	g.mu.Lock()
	if g.proving[c.claimed] >= maxProving {
		g.mu.Unlock()
		m.countFailure("identity", "too_many_proving")
		return false
	}
	g.proving[c.claimed]++
	g.mu.Unlock()
	if _, err := rand.Read(c.nonce[:]); err != nil {
		m.doneProving(c.claimed)
		return false
	}
	inst, ok := m.peers.byWorker(c.claimed)
	if !ok {
		m.doneProving(c.claimed)
		return false
	}
	body := make([]byte, proofBodyLen)
	binary.BigEndian.PutUint64(body, uint64(c.id))
	copy(body[8:], c.nonce[:])
	// On a goroutine: the caller is a connection's reader, and a send may
	// wait for a dial or for the transport to take the frame.
	go func() {
		if err := m.post(inst, proveHandler, body); err != nil {
			m.logger().Debug("velo: identity challenge not sent", "peer", inst, "err", err)
		}
	}()
	c.phase = connProving
	g.challenged.Add(1)
	c.timer = time.AfterFunc(proofWait(), func() { m.proofTimedOut(c) })
	return true
}

func (m *Messenger) doneProving(w ext.WorkerID) {
	g := &m.gate
	g.mu.Lock()
	if g.proving[w]--; g.proving[w] <= 0 {
		delete(g.proving, w)
	}
	g.mu.Unlock()
}

// proofTimedOut refuses what a connection held: its peer did not prove it.
func (m *Messenger) proofTimedOut(c *connState) {
	c.mu.Lock()
	if c.phase != connProving {
		c.mu.Unlock()
		return
	}
	c.phase = connRefused
	held := c.takeHeldLocked()
	c.mu.Unlock()
	m.doneProving(c.claimed)
	m.countFailure("identity", "unproven")
	m.refuseHeld(held)
}

func (c *connState) takeHeldLocked() []heldReq {
	held := c.held
	c.held, c.heldBytes = nil, 0
	return held
}

// refuseHeld answers held requests with ErrIdentityUnproven. The answer
// goes to the worker they named, at its registered address: a peer whose
// proof was lost learns why its calls failed, and a stranger learns
// nothing.
func (m *Messenger) refuseHeld(held []heldReq) {
	for _, j := range jobs(held) {
		m.refuseIdentity(j)
	}
}

func (m *Messenger) refuseIdentity(j job) {
	m.gate.refused.Add(1)
	m.reply(j.hdr, string(j.hdr.handler), nil, msgerr.ErrIdentityUnproven)
	j.done()
}

// onProof handles a _velo_proof request that arrived on its connection. It
// returns the requests the proof releases, in arrival order, for the caller
// to dispatch before anything read after the proof.
func (m *Messenger) onProof(j job) []job {
	defer j.done()
	p := j.payload
	if j.conn == 0 || len(p) != proofBodyLen || ext.ConnID(binary.BigEndian.Uint64(p)) != j.conn {
		m.countFailure("identity", "bad_proof")
		return nil
	}
	m.gate.mu.Lock()
	c := m.gate.conns[j.conn]
	m.gate.mu.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.phase != connProving || subtle.ConstantTimeCompare(c.nonce[:], p[8:]) != 1 {
		c.mu.Unlock()
		m.countFailure("identity", "bad_proof")
		return nil
	}
	c.phase = connProven
	c.proven.Store(true)
	c.timer.Stop()
	held := c.takeHeldLocked()
	c.mu.Unlock()
	m.doneProving(c.claimed)
	m.gate.proven.Add(1)
	m.confirm(c.id)
	return jobs(held)
}

// onProve answers a challenge: the same bytes go back as _velo_proof on
// every lane to the challenger, so the one connection it asked about
// carries them, whichever lane it is.
func (m *Messenger) onProve(c *Context) {
	if c.sender == m.wid {
		// This node challenges no connection of its own (the loopback
		// has none): a challenge in its name is forged.
		m.countFailure("identity", "claims_own_identity")
		return
	}
	if len(c.Payload) != proofBodyLen {
		m.countFailure("identity", "bad_challenge")
		return
	}
	p, ok := m.peers.getWorker(c.sender)
	if !ok {
		// Only a peer this node knows gets a proof: what it sends goes to
		// that peer's registered address, never back to an asker.
		m.countFailure("identity", "challenge_from_unknown")
		return
	}
	if !p.allowProof(time.Now()) {
		// A challenge itself proves nothing (anyone can send one in the
		// peer's name), so a flood of them must not make this node write
		// to the peer without bound.
		m.countFailure("identity", "challenges_over_rate")
		return
	}
	body := append([]byte(nil), c.Payload...)
	if h := m.testOnChallenge.Load(); h != nil {
		(*h)(body)
	}
	inst := p.info.InstanceID
	for lane := range p.primary.Lanes(inst) {
		if err := m.postLane(inst, lane, proofHandler, body); err != nil {
			m.logger().Debug("velo: identity proof not sent", "peer", inst, "lane", lane, "err", err)
		}
	}
}

// bindFirstContact binds conn to w when conn speaks for w and has not
// had to prove anything yet: the hello that introduced an unknown peer
// came on it. It reports whether it bound conn.
func (m *Messenger) bindFirstContact(conn ext.ConnID, w ext.WorkerID) bool {
	if conn == 0 {
		return false
	}
	m.gate.mu.Lock()
	c := m.gate.conns[conn]
	m.gate.mu.Unlock()
	if c == nil || c.claimed != w {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase != connTrusted {
		return false
	}
	c.phase = connProven
	c.proven.Store(true)
	return true
}

// afterFirstContact runs once the peer that a hello on conn introduced is
// registered. A Go peer fences its new connections until this node
// confirms them (confirm), so the hello's connection is confirmed, and
// every other connection that spoke for the peer while it was unknown, and
// was trusted so, is challenged now: its dialer waits for a confirmation
// too, and a stranger's connection in the peer's name must not stay
// trusted once the peer is known.
func (m *Messenger) afterFirstContact(conn ext.ConnID, w ext.WorkerID) {
	if !m.proves(w) {
		return
	}
	m.confirm(conn)
	m.gate.mu.Lock()
	var trusted []*connState
	for id, c := range m.gate.conns {
		if id != conn && c.claimed == w {
			trusted = append(trusted, c)
		}
	}
	m.gate.mu.Unlock()
	for _, c := range trusted {
		c.mu.Lock()
		if c.phase == connTrusted && !m.challengeLocked(c) {
			c.phase = connRefused
		}
		c.mu.Unlock()
	}
}

// confirm tells the dialer of conn that it is bound, on the transport it
// came in on (ext.ConnConfirmer): the dialer lifts the fence that kept its
// first burst within this node's hold.
func (m *Messenger) confirm(conn ext.ConnID) {
	for _, tr := range m.trs {
		if cc, ok := ext.ConfirmerOf(tr); ok {
			cc.ConfirmConn(conn)
		}
	}
}

// warnUnconfirmable logs each transport of the keys whose Go dialers
// fence new connections (tcp and uds, internal/streamsock) that cannot
// confirm a connection (ext.ConfirmerOf): usually a wrapper that neither
// forwards ConfirmConn nor unwraps. Its dialers then wait out their
// fence's timeout on a busy new connection, and nothing else would say
// why.
func (m *Messenger) warnUnconfirmable() {
	for _, tr := range m.trs {
		if k := tr.Key(); k != "tcp" && k != "uds" {
			continue
		}
		if _, ok := ext.ConfirmerOf(tr); !ok {
			m.logger().Warn("velo: a transport cannot confirm the connections it accepts; Go peers that dial this node through it hold a busy new connection for up to 5 s (implement ext.ConnConfirmer or ext.TransportWrapper)",
				"transport", string(tr.Key()), "type", fmt.Sprintf("%T", tr))
		}
	}
}

// maxProofsPerSecond bounds the challenges a node answers for one peer: a
// real peer challenges once per connection this node opens to it.
const maxProofsPerSecond = 64

// allowProof counts one answered challenge in the current second.
func (p *peer) allowProof(now time.Time) bool {
	sec := now.Unix()
	if w := p.proofWindow.Load(); w != sec && p.proofWindow.CompareAndSwap(w, sec) {
		p.proofCount.Store(0)
	}
	return p.proofCount.Add(1) <= maxProofsPerSecond
}

// onConnClosed forgets a connection that ended; what it still held is
// refused, and the handlers of its requests are told (their contexts end).
// The calls that wait for its peer's last answers learn that it carries no
// more (shutdown_quiet.go).
func (m *Messenger) onConnClosed(id ext.ConnID) {
	m.forgetConnTLS(id)
	m.answerConnEnded(id) // whatever it carried is read: see failAfterAnswers
	m.gate.mu.Lock()
	c := m.gate.conns[id]
	delete(m.gate.conns, id)
	m.gate.mu.Unlock()
	if c == nil {
		return
	}
	// After the gate forgot it: a context asked for from now on finds the
	// connection gone (handlerctx.go).
	m.callerConnClosed(id)
	c.mu.Lock()
	wasProving := c.phase == connProving
	c.phase = connRefused
	if c.timer != nil {
		c.timer.Stop()
	}
	held := c.takeHeldLocked()
	c.mu.Unlock()
	if wasProving {
		m.doneProving(c.claimed)
	}
	m.refuseHeld(held)
}

// closeGate refuses everything held, at teardown.
func (m *Messenger) closeGate() {
	m.gate.mu.Lock()
	ids := make([]ext.ConnID, 0, len(m.gate.conns))
	for id := range m.gate.conns {
		ids = append(ids, id)
	}
	m.gate.mu.Unlock()
	for _, id := range ids {
		m.onConnClosed(id)
	}
}
