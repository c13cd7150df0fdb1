// Package uds is the Unix domain socket messenger transport. It shares the
// codec, the coalescing writer and the lanes of the TCP transport; only
// listening and dialing differ.
package uds

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamsock"
)

// Key is the address key of the UDS transport.
const Key ext.TransportKey = "uds"

// Option configures the transport.
type Option func(*options)

type options struct {
	path string
	cfg  streamsock.Config
}

// WithPath sets the socket path. By default a fresh path under the system
// temp directory is used. An existing file at the path is removed first.
func WithPath(p string) Option { return func(o *options) { o.path = p } }

// WithLanes keeps up to n ordered connections to each peer (default 1).
func WithLanes(n int) Option { return func(o *options) { o.cfg.Lanes = n } }

// WithTeardownGrace sets how long queued frames are still written after
// Shutdown (default 1 s).
func WithTeardownGrace(d time.Duration) Option { return func(o *options) { o.cfg.TeardownGrace = d } }

// WithMaxFrameSize bounds header plus payload (default 16 MiB).
func WithMaxFrameSize(n int) Option { return func(o *options) { o.cfg.MaxFrameSize = n } }

// WithChannelBytes bounds the send channel of one (peer, lane) (default 4 MiB).
func WithChannelBytes(n int) Option { return func(o *options) { o.cfg.ChannelBytes = n } }

// WithPriority sets the priority used to pick a peer's primary transport
// (default 200: a peer on the same host prefers UDS to TCP).
func WithPriority(p int) Option { return func(o *options) { o.cfg.Priority = p } }

// New builds a UDS transport. It listens when the node starts it.
func New(opts ...Option) (*Transport, error) {
	var o options
	o.cfg.Key = Key
	o.cfg.Priority = 200
	for _, opt := range opts {
		opt(&o)
	}
	s, err := streamsock.New(&network{o: o}, o.cfg)
	if err != nil {
		return nil, err
	}
	return &Transport{s: s}, nil
}

// Transport is the Unix domain socket messenger transport. It implements ext.Transport;
// the node calls its methods, and an application needs only New, the
// options, and Stats.
type Transport struct {
	s *streamsock.Transport
}

var _ ext.Transport = (*Transport)(nil)

// RetainsOwners says that the transport holds an outbound frame's Owner
// while it holds the frame's bytes (ext.OwnerRetainer).
func (t *Transport) RetainsOwners() bool { return true }

// Key is the address key, "uds".
func (t *Transport) Key() ext.TransportKey { return t.s.Key() }

// Priority orders transports that reach the same peer; higher wins.
func (t *Transport) Priority() int { return t.s.Priority() }

// Start listens and returns the address entry peers dial.
func (t *Transport) Start(ctx context.Context, adapter *ext.TransportAdapter) ([]byte, error) {
	return t.s.Start(ctx, adapter)
}

// Register learns a peer's endpoint. Nothing is dialed until the first send.
func (t *Transport) Register(p ext.PeerInfo) error { return t.s.Register(p) }

// Unregister forgets a peer and closes its connections; frames still queued
// for it fail at once.
func (t *Transport) Unregister(id ext.InstanceID) { t.s.Unregister(id) }

// Send sends f on lane 0 without waiting for the wire.
func (t *Transport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	return t.s.SendOnLane(target, 0, f)
}

// SendOnLane sends f on one of the ordered lanes to target without waiting
// for the wire.
func (t *Transport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	return t.s.SendOnLane(target, lane, f)
}

// Lanes is the number of ordered connections kept to each peer.
func (t *Transport) Lanes(target ext.InstanceID) int { return t.s.Lanes(target) }

// MaxMessageSize is the largest header plus payload sent or accepted.
func (t *Transport) MaxMessageSize() int { return t.s.MaxMessageSize() }

// CheckHealth reports a peer healthy when one of its lanes is connected,
// and otherwise dials it once.
func (t *Transport) CheckHealth(ctx context.Context, target ext.InstanceID) error {
	return t.s.CheckHealth(ctx, target)
}

// SetObservability installs the metrics handle.
func (t *Transport) SetObservability(o ext.Observability) { t.s.SetObservability(o) }

// Shutdown writes what is queued until the teardown grace ends, fails the
// rest, says goodbye on each accepted connection and closes the listener.
func (t *Transport) Shutdown() { t.s.Shutdown() }

// Closed is closed once the writers are done (or the grace plus half a
// second passed) and the listener is closed.
func (t *Transport) Closed() <-chan struct{} { return t.s.Closed() }

// Stats are the counts of what the transport did to protect itself.
type Stats struct {
	// RefusedConnections: inbound connections closed as soon as they were
	// accepted, because WithMaxConnections were already open.
	RefusedConnections uint64
	// StalledConnections: inbound connections closed because a frame
	// stayed half-received past WithFrameTimeout.
	StalledConnections uint64
	// AcceptErrors: failed accepts (out of file descriptors, say), each
	// followed by a pause of 5 ms doubling up to 1 s.
	AcceptErrors uint64
}

// Stats reads the transport's counters.
func (t *Transport) Stats() Stats { return Stats(t.s.Stats()) }

// WithMaxConnections bounds the inbound connections open at once (default
// 4096). One more is closed as soon as it is accepted, and counted.
func WithMaxConnections(n int) Option { return func(o *options) { o.cfg.MaxConnections = n } }

// WithFrameTimeout bounds how long a frame may stay half-received before
// its connection is closed (default 30 s). The cut comes between one and
// one and a half timeouts after the frame started.
func WithFrameTimeout(d time.Duration) Option { return func(o *options) { o.cfg.FrameTimeout = d } }

// WithLogger sets where the transport logs (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.cfg.Logger = l } }

type network struct {
	o      options
	tmpDir string // made by Listen when no path was given; removed at shutdown
}

// Cleanup removes the temporary directory of the socket, if Listen made one.
func (n *network) Cleanup() {
	if n.tmpDir != "" {
		os.RemoveAll(n.tmpDir)
	}
}

func (n *network) Listen(ctx context.Context) (net.Listener, []byte, error) {
	path := n.o.path
	if path == "" {
		dir, err := os.MkdirTemp("", "velo-uds-")
		if err != nil {
			return nil, nil, err
		}
		path = filepath.Join(dir, "sock")
		n.tmpDir = dir
	} else if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, nil, fmt.Errorf("uds: remove stale socket: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, nil, err
	}
	// Close removes the socket file.
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	return ln, []byte(endpointPrefix + path), nil
}

// endpointPrefix starts the address entry, as the reference writes it
// (lib/velo/src/transports/uds/transport.rs); a plain path is read too.
const endpointPrefix = "uds://"

// SocketPath is the socket path of a UDS address entry.
func SocketPath(endpoint []byte) (string, error) {
	path := strings.TrimPrefix(string(endpoint), endpointPrefix)
	if path == "" {
		return "", fmt.Errorf("uds: empty socket path in endpoint %q", endpoint)
	}
	return path, nil
}

// CheckEndpoint refuses, at registration, an entry with no path.
func (n *network) CheckEndpoint(ep []byte) error {
	_, err := SocketPath(ep)
	return err
}

func (n *network) Dial(ctx context.Context, endpoint []byte) (net.Conn, error) {
	path, err := SocketPath(endpoint)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}
