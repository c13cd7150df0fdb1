package velo

import (
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
)

// WithStreamReservation sets how long the node's anchors wait for a
// producer: UnattachedTimeout (120 s by default) for an anchor nobody has
// attached to, AcceptWindow (180 s) for a mux bind or a PrebindAnchor
// ticket whose producer has not opened its slot. A zero or negative field
// keeps its default. See streaming.ReservationConfig.
func WithStreamReservation(c streaming.ReservationConfig) Option {
	return Option{stream: []streaming.ManagerOption{streaming.WithReservationConfig(c)}}
}

// WithStreamHeartbeat sets the heartbeat interval of the node's remote
// streams (5 s by default): an idle producer sends one per interval, and
// a stream silent for three intervals ends with streaming.ErrSenderDropped.
// A value under a millisecond keeps the default.
func WithStreamHeartbeat(d time.Duration) Option {
	return Option{stream: []streaming.ManagerOption{streaming.WithHeartbeatInterval(d)}}
}

// WithMuxOnly builds the node with no per-stream TCP listener: every
// stream to or from another node rides the messenger mux, and an attach
// that cannot use the mux (from a peer without it) is refused. New fails
// when the mux is disabled (WithMux(streaming.MuxConfig{Disabled: true}) or
// the VELO_MESSENGER_MUX_DISABLE environment variable).
func WithMuxOnly() Option {
	return Option{stream: []streaming.ManagerOption{streaming.WithMuxOnly()}}
}

// WithFrameTransport runs the node's per-stream path (the streams that do
// not ride the mux) over ft instead of TCP, for example the gRPC frame
// transport (grpc.NewFrameTransport). Both ends of such a stream need a
// frame transport of the same key. It takes the place of the TLS that a
// TCP or gRPC transport built WithTLS would give the path: a frame
// transport has TLS of its own (grpc.WithFrameTLS). See
// streaming.WithFrameTransport.
func WithFrameTransport(ft ext.FrameTransport) Option {
	return Option{stream: []streaming.ManagerOption{streaming.WithFrameTransport(ft)}}
}
