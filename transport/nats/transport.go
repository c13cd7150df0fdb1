package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	natsgo "github.com/nats-io/nats.go"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgpeers"
)

// The NATS headers every frame carries, as the reference writes them.
const (
	// HeaderType holds the frame's ext.MessageType as a decimal string.
	HeaderType = "Velo-Type"
	// HeaderLen holds the length of the velo header at the front of the
	// NATS payload, in decimal; the payload follows it.
	HeaderLen = "Velo-HLen"
)

// typeValues are the Velo-Type values, made once so a send allocates none.
var typeValues = func() (v [ext.NumMessageTypes][]string) {
	for i := range v {
		v[i] = []string{strconv.Itoa(i)}
	}
	return v
}()

// Inbound subscription limits: what nats.go holds for a receiver that
// falls behind before it drops (a slow consumer, counted by the server and
// nats.go, not by velo). NATS pushes back on nobody.
const (
	pendingMsgs  = 1 << 20
	pendingBytes = 256 << 20
)

// healthTimeout bounds a health check whose context has no deadline.
const healthTimeout = 5 * time.Second

// reconnectPoll is how often a writer whose publish found nats.go's
// reconnect buffer full looks again whether the connection is back.
const reconnectPoll = 20 * time.Millisecond

// Transport is the NATS messenger transport: one subscription per
// instance on {cluster}.velo.{base58(instance id)}, one publish per frame.
type Transport struct {
	o     options
	nc    *natsgo.Conn
	owned bool // nc was dialled here (WithURL) and is closed at Shutdown

	id      ext.InstanceID
	bound   bool
	subject string
	maxSize int

	dataSub, healthSub *natsgo.Subscription

	// core is the peer table, the lanes and the teardown grace, shared
	// with transport/zmq; the publishing is this package's (writer.go).
	core msgpeers.Core

	shutOnce sync.Once
	closed   chan struct{}

	malformed     atomic.Uint64
	drainNoReturn atomic.Uint64
	noResponders  atomic.Uint64
}

// Stats counts what the transport refused or lost.
type Stats struct {
	// Malformed inbound messages: missing or invalid Velo-Type or
	// Velo-HLen, or a Velo-HLen longer than the payload. Each is dropped.
	Malformed uint64
	// DrainRefused requests refused because the node drains; those with a
	// reply subject were echoed ShuttingDown, DrainDropped of them had
	// none (a sender that asks for no echo, as the reference's does).
	DrainRefused, DrainDropped uint64
	// SendFailed frames were admitted but not published (unregister,
	// shutdown past its grace, a publish error).
	SendFailed uint64
	// RouteFailed inbound frames found the node stopped.
	RouteFailed uint64
	// NoResponders counts the server's "no responders" answers: a request
	// this node sent names its inbound subject as the reply, and when the
	// peer's subject has no subscriber (the peer is gone) the server says
	// so there. The answer does not name the peer, so it is counted only.
	NoResponders uint64
}

// New builds a NATS transport. It connects (WithURL) or takes its
// connection (WithConn) when the node starts it.
func New(opts ...Option) (*Transport, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	o.defaults()
	if o.conn == nil && o.url == "" {
		return nil, errors.New("nats: WithConn or WithURL is required")
	}
	if !validToken(o.cluster) {
		return nil, fmt.Errorf("nats: cluster id %q is not a valid subject prefix", o.cluster)
	}
	t := &Transport{o: o, closed: make(chan struct{})}
	t.core.Init(o.channelBytes)
	return t, nil
}

// validToken reports whether s can start a subject: non-empty, no spaces
// or wildcards, no empty token.
func validToken(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '*' || c == '>':
			return false
		case c == '.' && s[i+1] == '.':
			return false
		}
	}
	return true
}

// Key is "nats".
func (t *Transport) Key() ext.TransportKey { return Key }

// Priority orders transports when several reach a peer (default 50).
func (t *Transport) Priority() int { return t.o.priority }

// RetainsOwners is true: a queued frame keeps its Owner until published.
func (t *Transport) RetainsOwners() bool { return true }

// BindInstance names the inbound subject after id; the node calls it
// before Start. Without it the transport draws an id of its own.
func (t *Transport) BindInstance(id ext.InstanceID) { t.id, t.bound = id, true }

// Subject is the inbound subject, once started.
func (t *Transport) Subject() string { return t.subject }

// Conn is the NATS connection the transport uses, once started.
func (t *Transport) Conn() *natsgo.Conn { return t.nc }

// SetObservability installs the metrics handle.
func (t *Transport) SetObservability(o ext.Observability) { t.core.SetObservability(o) }

func (t *Transport) observe() ext.Observability { return t.core.Observe() }

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{
		Malformed:    t.malformed.Load(),
		DrainRefused: t.core.DrainRefused(),
		DrainDropped: t.drainNoReturn.Load(),
		SendFailed:   t.core.SendFailed(),
		RouteFailed:  t.core.RouteFailed(),
		NoResponders: t.noResponders.Load(),
	}
}

// Start connects, subscribes to the inbound and health subjects and
// returns the inbound subject as the address entry. The subscriptions are
// live on the server before Start returns, so a peer that learns the
// address can send at once.
func (t *Transport) Start(ctx context.Context, adapter *ext.TransportAdapter) ([]byte, error) {
	nc, owned := t.o.conn, false
	if nc == nil {
		var err error
		if nc, err = connect(t.o.url, t.o.natsOpts); err != nil {
			return nil, fmt.Errorf("nats: connect %s: %w", t.o.url, err)
		}
		owned = true
	}
	if !t.bound {
		t.id = ext.NewInstanceID()
	}
	t.nc, t.owned = nc, owned
	t.core.SetAdapter(adapter)
	t.subject = InboundSubject(t.o.cluster, t.id)
	t.maxSize = int(nc.MaxPayload()) - natsOverhead
	if t.o.maxFrameSize > 0 && t.o.maxFrameSize < t.maxSize {
		t.maxSize = t.o.maxFrameSize
	}
	if err := t.subscribe(ctx); err != nil {
		t.unsubscribe()
		if owned {
			nc.Close()
		}
		return nil, err
	}
	t.core.MarkStarted()
	return []byte(t.subject), nil
}

func (t *Transport) subscribe(ctx context.Context) error {
	var err error
	if t.dataSub, err = t.nc.Subscribe(t.subject, t.onMsg); err != nil {
		return fmt.Errorf("nats: subscribe %s: %w", t.subject, err)
	}
	if err = t.dataSub.SetPendingLimits(pendingMsgs, pendingBytes); err != nil {
		return err
	}
	health := t.subject + healthSuffix
	if t.healthSub, err = t.nc.Subscribe(health, onHealth); err != nil {
		return fmt.Errorf("nats: subscribe %s: %w", health, err)
	}
	// A flush is a round trip: the server has both subscriptions when it
	// answers, so nothing sent to the advertised subject is lost.
	ctx, cancel := msgpeers.WithDefaultTimeout(ctx, healthTimeout)
	defer cancel()
	if err = t.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("nats: flush subscriptions: %w", err)
	}
	return nil
}

func (t *Transport) unsubscribe() {
	for _, s := range []*natsgo.Subscription{t.dataSub, t.healthSub} {
		if s != nil {
			s.Unsubscribe()
		}
	}
}

// onHealth answers a health request with an empty reply, as the reference does.
func onHealth(m *natsgo.Msg) {
	if m.Reply != "" {
		m.Respond(nil)
	}
}

// parseFrame splits an inbound message by its headers; ok is false for a
// malformed one.
func parseFrame(m *natsgo.Msg) (f ext.Frame, ok bool) {
	typ, err := strconv.ParseUint(m.Header.Get(HeaderType), 10, 8)
	if err != nil || !ext.MessageType(typ).Valid() {
		return f, false
	}
	hlen, err := strconv.ParseUint(m.Header.Get(HeaderLen), 10, 63)
	if err != nil || hlen > uint64(len(m.Data)) {
		return f, false
	}
	return ext.Frame{Type: ext.MessageType(typ), Header: m.Data[:hlen:hlen], Payload: m.Data[hlen:]}, true
}

// isNoResponders reports whether m is the server's "no responders"
// status (an empty message with the header Status: 503).
func isNoResponders(m *natsgo.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// onMsg takes one inbound frame. nats.go gives each message its own copy
// of the payload, so the frame needs no owner.
func (t *Transport) onMsg(m *natsgo.Msg) {
	f, ok := parseFrame(m)
	if !ok && isNoResponders(m) {
		// A request we sent named our subject as its reply and found no
		// subscriber: the server says so there. It does not say which
		// peer, so it is only counted; the caller's deadline ends the call.
		t.noResponders.Add(1)
		return
	}
	if !ok {
		t.malformed.Add(1)
		t.observe().Rejection(ext.RejectMalformed)
		return
	}
	if t.core.Deliver(f) {
		t.refuseDraining(m, f)
	}
}

// refuseDraining answers a request that arrived while the node drains
// with a ShuttingDown frame echoing its header, on the reply subject the
// sender named (a Go sender names its own inbound subject). A request
// without one is dropped, as the reference drops it.
func (t *Transport) refuseDraining(m *natsgo.Msg, f ext.Frame) {
	if m.Reply == "" {
		t.drainNoReturn.Add(1)
		return
	}
	echo := &natsgo.Msg{
		Subject: m.Reply,
		Header:  natsgo.Header{HeaderType: typeValues[ext.ShuttingDown], HeaderLen: {strconv.Itoa(len(f.Header))}},
		Data:    f.Header,
	}
	t.nc.PublishMsg(echo) // a lost echo leaves the caller to its deadline
}

// Register learns a peer's inbound subject from its "nats" entry.
func (t *Transport) Register(info ext.PeerInfo) error {
	ep, err := info.Address.Lookup(Key)
	if err != nil {
		return err
	}
	subject := string(ep)
	if !utf8.ValidString(subject) || !validToken(subject) {
		return fmt.Errorf("nats: peer %v: invalid subject %q", info.InstanceID, subject)
	}
	return t.core.Register(info.InstanceID, subject, t.o.lanes, func(l *msgpeers.Lane) msgpeers.Writer {
		return newWriter(t, l, subject)
	})
}

// Unregister forgets a peer; what is queued for it is reported failed.
func (t *Transport) Unregister(id ext.InstanceID) { t.core.Unregister(id) }

// Send sends on lane 0.
func (t *Transport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	return t.SendOnLane(target, 0, f)
}

// SendOnLane queues f for target's subject. A frame larger than
// MaxMessageSize is refused here with an ext.FrameTooLargeError.
func (t *Transport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	return t.core.SendOnLane(target, lane, f, t.maxSize)
}

// Lanes is the number of lanes kept to a registered peer, 0 for another.
func (t *Transport) Lanes(target ext.InstanceID) int { return t.core.Lanes(target) }

// LaneStats reports each lane to target (ext.LaneStatser): whether the
// NATS connection is up, the peer's subject, the frames and bytes (headers
// and payloads) published and what is queued. Nil for a peer not
// registered.
func (t *Transport) LaneStats(target ext.InstanceID) []ext.LaneStats {
	return t.core.LaneStats(target)
}

// MaxMessageSize is the largest header plus payload sent: the server's
// max_payload less 64 bytes, or WithMaxFrameSize when smaller. It is read
// from the server at Start (0 before).
func (t *Transport) MaxMessageSize() int { return t.maxSize }

// CheckHealth sends a request to the peer's health subject and waits for
// the empty reply until ctx ends (5 s when ctx has no deadline). A peer
// with no subscription fails at once (NATS reports no responders); one
// that does not answer fails at the deadline. Both match
// ext.ErrPeerUnreachable.
func (t *Transport) CheckHealth(ctx context.Context, target ext.InstanceID) error {
	subject, err := t.core.HealthAddr(target)
	if err != nil {
		return err
	}
	ctx, cancel := msgpeers.WithDefaultTimeout(ctx, healthTimeout)
	defer cancel()
	if _, err := t.nc.RequestWithContext(ctx, subject+healthSuffix, nil); err != nil {
		return fmt.Errorf("nats: health of %v: %w: %w", target, ext.ErrPeerUnreachable, err)
	}
	return nil
}

// Shutdown stops receiving (both subscriptions go), publishes what was
// admitted within the teardown grace, reports the rest failed, flushes
// the connection within what is left of the grace and closes it when the
// transport dialled it. It returns when done; Closed is closed then.
func (t *Transport) Shutdown() {
	t.shutOnce.Do(t.shutdown)
	<-t.closed
}

func (t *Transport) shutdown() {
	defer close(t.closed)
	end, started := t.core.BeginShutdown(t.o.teardownGrace)
	if !started {
		return
	}
	t.unsubscribe()
	t.core.StopWriters()
	t.core.WaitWriters()
	// What nats.go buffered goes to the server now; a server that is away
	// keeps it in the reconnect buffer, which Close discards.
	// A connection that is reconnecting holds its lock while it dials, so
	// a flush could wait past the grace; its buffer goes out on reconnect
	// when the connection is the caller's.
	if t.nc.IsConnected() {
		t.nc.FlushTimeout(max(time.Until(end), 10*time.Millisecond))
	}
	if t.owned {
		t.nc.Close()
	}
}

// Closed is closed once Shutdown finished.
func (t *Transport) Closed() <-chan struct{} { return t.closed }
