// Package uds is the Unix domain socket messenger transport. It shares the
// codec, the coalescing writer and the lanes of the TCP transport; only
// listening and dialing differ.
package uds

// The Transport type, its methods, Stats and the options shared with the
// other socket transport are generated from one template.
//go:generate go run ../../internal/streamsock/genfront uds

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

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
