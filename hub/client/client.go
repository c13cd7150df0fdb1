package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// Config says where the hub is and how to reach it.
type Config struct {
	// URL is the hub's control listener, e.g. "http://hub:8337": the
	// registration, the heartbeat, the service writes and the control
	// extension calls go there.
	URL string
	// PublicURL is the hub's public listener, e.g. "http://hub:1337": the
	// peer lookups, the service reads and watches, and the public
	// extension calls. Empty: URL (the control listener serves the public
	// core routes too).
	PublicURL string
	// HTTPClient replaces the default client (5 s to connect, 60 s a
	// request); the caller then sets its own timeouts. Watch streams use
	// it too, so it should have no overall Timeout if watches must last:
	// set StreamClient for them.
	HTTPClient *http.Client
	// StreamClient is used for the service watches. Empty: HTTPClient
	// when that is set, else the default transport with no overall
	// timeout.
	StreamClient *http.Client
	// RetryInterval is the pause before the client sends again a service
	// change that got no answer, and before it retries a recovery after a
	// hub restart. Default 1 s.
	RetryInterval time.Duration
	// HeartbeatInterval is how often a registration made with
	// RegisterPeer (a hub without velo, whose liveness is its TTL) sends
	// the HTTP heartbeat. Default 10 s.
	HeartbeatInterval time.Duration
	// Logger gets the client's warnings. Default slog.Default().
	Logger *slog.Logger
}

// HubClient is a handle on one hub registration. Handles are cheap:
// Clone makes another that shares the registration, and Close of the
// last open handle unregisters. All methods are safe for concurrent use.
type HubClient struct {
	s      *state
	closed atomic.Bool
}

// held is the registration the client holds.
type held struct {
	cred  protocol.Credential
	epoch protocol.Epoch
	hubID protocol.HubID
}

// state is shared by every handle of one client.
type state struct {
	cfg            Config
	log            *slog.Logger
	http, stream   *http.Client
	ctlURL, pubURL string

	refs atomic.Int64 // open handles
	// op orders the requests that change the registration or the
	// services: one at a time, so two requests of one client never race.
	op chan struct{}

	mu          sync.Mutex
	closed      bool // the last handle closed
	node        *velo.Node
	peer        ext.PeerInfo
	hasPeer     bool
	payloads    map[string]json.RawMessage // the extension payloads of the last Register
	reg         *held
	registering int  // register calls running
	blocked     bool // a register without a credential got unauthorized
	recovered   bool
	hubPeerFrom protocol.HubID // the hub whose velo peer the node was given
	handlerOn   *velo.Node     // the node the heartbeat handler is on
	svc         services

	kick    chan struct{} // cap 1: the loop has work (sync, recovery)
	stop    chan struct{}
	done    chan struct{}
	recover bool // the loop should register again with the credential
	// rejoin: the loop should register again without a credential (an
	// HTTP heartbeat learned that the hub no longer holds the
	// registration), unless left.
	rejoin  bool
	left    bool // Unregister ran since the last Register: stay out
	httpHB  bool // the loop sends HTTP heartbeats (RegisterPeer)
	silence silence
}

// New builds a client of the hub at cfg.URL. It sends nothing until
// Register.
func New(cfg Config) (*HubClient, error) {
	ctl, err := baseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	pub := ctl
	if cfg.PublicURL != "" {
		if pub, err = baseURL(cfg.PublicURL); err != nil {
			return nil, err
		}
	}
	s := &state{cfg: cfg, log: cfg.Logger, ctlURL: ctl, pubURL: pub, op: make(chan struct{}, 1),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.svc.init()
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.cfg.RetryInterval <= 0 {
		s.cfg.RetryInterval = time.Second
	}
	if s.cfg.HeartbeatInterval <= 0 {
		s.cfg.HeartbeatInterval = protocol.DefaultHeartbeatInterval
	}
	s.http, s.stream = defaultHTTP()
	if cfg.HTTPClient != nil {
		s.http, s.stream = cfg.HTTPClient, cfg.HTTPClient
	}
	if cfg.StreamClient != nil {
		s.stream = cfg.StreamClient
	}
	s.refs.Store(1)
	go s.loop()
	return &HubClient{s: s}, nil
}

func baseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("hub client: %q is not an http(s) URL of a hub listener", raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// Clone returns another handle on the same registration. It fails only
// when every handle is closed.
func (c *HubClient) Clone() (*HubClient, error) {
	for {
		n := c.s.refs.Load()
		if n <= 0 {
			return nil, ErrClosed
		}
		if c.s.refs.CompareAndSwap(n, n+1) {
			return &HubClient{s: c.s}, nil
		}
	}
}

// Close closes this handle. Closing the last open handle sends the
// DELETE that unregisters (bounded by the request timeout, best effort:
// if it fails, the hub's probes or its TTL remove the entry), stops the
// client's background work and makes the discovery and extension handles
// answer ErrNotRegistered. A second Close of one handle does nothing.
func (c *HubClient) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c.s.refs.Add(-1) > 0 {
		return nil
	}
	s := c.s
	ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
	defer cancel()
	err := s.unregister(ctx)
	if errors.Is(err, ErrNotRegistered) {
		err = nil
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	return err
}

func (c *HubClient) live() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// IsRegistered reports whether the client holds a registration. Only an
// answer of the hub changes it: an eviction the client has not heard of
// yet does not show.
func (c *HubClient) IsRegistered() bool {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.reg != nil
}

// Recovered reports whether the hub restarted under the registration the
// client holds: a heartbeat came from another hub id than the one that
// gave the registration, or the hub answered recovered. The client then
// registers again presenting its credential, by itself. It stays true
// until the client registers without a credential or drops the
// registration.
func (c *HubClient) Recovered() bool {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.recovered
}

// Epoch is the epoch of the registration held, 0 without one.
func (c *HubClient) Epoch() protocol.Epoch {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.reg == nil {
		return 0
	}
	return c.s.reg.epoch
}

// HubID is the id of the hub that gave the registration held.
func (c *HubClient) HubID() protocol.HubID {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.reg == nil {
		return protocol.HubID{}
	}
	return c.s.reg.hubID
}

// acquire takes the op token, or gives up when ctx ends.
func (s *state) acquire(ctx context.Context) error {
	select {
	case s.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *state) release() { <-s.op }

// dropLocked forgets the registration held: the next register starts
// without a credential, and the hub's services are unknown.
func (s *state) dropLocked(why string) {
	if s.reg == nil {
		return
	}
	s.log.Warn("hub client: dropping the registration", "instance", s.peer.InstanceID, "why", why)
	s.reg = nil
	s.recovered = false
	s.svc.forgetHub()
}

// settle applies the rules for an answer to a call that presented the
// credential: unauthorized and register_again drop the registration,
// recovered starts a recovery.
func (s *state) settle(err error, notFoundDrops bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked(err, notFoundDrops)
}

// settleLocked is settle with s.mu held.
func (s *state) settleLocked(err error, notFoundDrops bool) {
	c := code(err)
	switch {
	case c == protocol.CodeUnauthorized || c == protocol.CodeRegisterAgain:
		s.dropLocked(string(c))
	case c == protocol.CodeNotFound && notFoundDrops:
		s.dropLocked(string(c))
	case c == protocol.CodeRecovered && s.reg != nil:
		s.recovered = true
		s.recover = true
		s.kickLocked()
	}
}

func (s *state) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// credential is the credential held, for a call made on it.
func (s *state) credential() (protocol.Credential, ext.InstanceID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.reg == nil {
		return "", ext.InstanceID{}, ErrNotRegistered
	}
	return s.reg.cred, s.peer.InstanceID, nil
}
