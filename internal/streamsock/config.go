package streamsock

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// Network is what differs between socket kinds: how to listen and dial.
type Network interface {
	// Listen opens the listening socket; endpoint is the address entry
	// peers dial. Socket options must be set before the socket listens.
	Listen(ctx context.Context) (ln net.Listener, endpoint []byte, err error)
	// Dial connects to a peer's endpoint. Socket options must be set before
	// the first write.
	Dial(ctx context.Context, endpoint []byte) (net.Conn, error)
}

// LaneDialer is implemented by a Network whose dial depends on the lane:
// QUIC dials each lane from its own UDP socket, to the peer socket that
// lane is spread to. Lanes dial with DialLane when the Network has it.
type LaneDialer interface {
	DialLane(ctx context.Context, endpoint []byte, lane int) (net.Conn, error)
}

// EndpointChecker is implemented by a Network that can tell, when a peer
// registers, whether its endpoint is one it could dial.
type EndpointChecker interface {
	CheckEndpoint(endpoint []byte) error
}

// Config holds the settings shared by the socket transports. Zero values
// mean the defaults.
type Config struct {
	Key      ext.TransportKey
	Priority int
	// Lanes is the number of ordered connections kept to each peer (default 1).
	Lanes int
	// MaxFrameSize bounds header plus payload (default 16 MiB).
	MaxFrameSize int
	// TeardownGrace is how long writers keep writing queued frames after
	// Shutdown (default 1 s).
	TeardownGrace time.Duration
	// ChannelBytes bounds the send channel of one (peer, lane); sends beyond
	// it wait in the admission gate (default 4 MiB).
	ChannelBytes int
	// MaxConnections bounds the inbound connections open at once. One more
	// is closed as soon as it is accepted, and counted (default 4096).
	MaxConnections int
	// FrameTimeout bounds how long a frame may stay half-received. The
	// connection is closed, and counted, once it has waited this long (or up
	// to half as long again: the read deadline is not moved for every
	// frame). Default 30 s.
	FrameTimeout time.Duration
	// Logger receives what the transport reports (default slog.Default()).
	Logger *slog.Logger
}

// DefaultFrameTimeout is the FrameTimeout a zero Config gets. It also
// bounds a TLS handshake, on either end.
const DefaultFrameTimeout = defaultFrameTimeout

const (
	defaultGrace          = time.Second
	defaultChannelBytes   = 4 << 20
	defaultMaxConnections = 4096
	defaultFrameTimeout   = 30 * time.Second
	// maxBatchBytes caps one coalesced write so one batch cannot hog the
	// writer's memory.
	maxBatchBytes = 1 << 20
)

func (c *Config) fill() error {
	if c.Key == "" {
		return fmt.Errorf("streamsock: transport key is empty")
	}
	if c.Lanes == 0 {
		c.Lanes = 1
	}
	if c.Lanes < 0 || c.Lanes > 64 {
		return fmt.Errorf("streamsock: lanes must be 1..64, got %d", c.Lanes)
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = frame.DefaultMaxFrame
	}
	if c.MaxFrameSize < 0 || c.MaxFrameSize > 1<<30 {
		return fmt.Errorf("streamsock: max frame size %d out of range", c.MaxFrameSize)
	}
	if c.TeardownGrace == 0 {
		c.TeardownGrace = defaultGrace
	}
	if c.TeardownGrace < 0 {
		return fmt.Errorf("streamsock: negative teardown grace")
	}
	if c.ChannelBytes == 0 {
		c.ChannelBytes = defaultChannelBytes
	}
	if c.ChannelBytes < 0 {
		return fmt.Errorf("streamsock: negative channel size")
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = defaultMaxConnections
	}
	if c.MaxConnections < 0 {
		return fmt.Errorf("streamsock: negative connection limit")
	}
	if c.FrameTimeout == 0 {
		c.FrameTimeout = defaultFrameTimeout
	}
	if c.FrameTimeout < 0 {
		return fmt.Errorf("streamsock: negative frame timeout")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
