package grpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/transport/tcp"
)

// The gRPC frame transport: the per-stream path of streams over gRPC, as
// the Rust reference's GrpcFrameTransport carries them, so that a Go and a
// Rust node stream to each other on it.

// FrameKey is the gRPC frame transport's key: its address entry, and the
// transport that attach answers name.
const FrameKey ext.TransportKey = "grpc-stream"

// MaxStreamFrame is the largest stream frame the transport carries, the
// TCP streaming codec's limit (the reference's MAX_ITEM_BYTES): both ends
// take every frame a producer lets through.
const MaxStreamFrame = frame.DefaultMaxFrame

// DefaultTerminalAckTimeout is how long a producer waits, after its
// terminal frame, for the server to end the call: the confirmation that
// the consumer took the whole stream. Past it the stream counts as
// discarded. It is above the consumer's own liveness budget (three
// heartbeat intervals, 15 s by default), as in the reference.
const DefaultTerminalAckTimeout = 20 * time.Second

// ErrTerminalNotConfirmed is returned by a producer's Finish when the
// server did not end the call within the terminal ack timeout.
var ErrTerminalNotConfirmed = errors.New("grpc: the server did not confirm the stream's end in time")

// FrameOption configures a FrameTransport.
type FrameOption func(*frameOptions)

type frameOptions struct {
	ackTimeout  time.Duration
	connTimeout time.Duration
	logger      *slog.Logger
	tls         *tls.Config // WithFrameTLS, as given
	// listen and dial replace the network's for tests (an end whose
	// sockets a test kills); nil: TCP.
	listen func(addr string) (net.Listener, error)
	dial   func(ctx context.Context, addr string) (net.Conn, error)
}

// WithTerminalAckTimeout sets how long a producer waits for the server's
// end of the call after its terminal (default DefaultTerminalAckTimeout).
func WithTerminalAckTimeout(d time.Duration) FrameOption {
	return func(o *frameOptions) { o.ackTimeout = d }
}

// WithFrameConnectTimeout bounds how long Dial waits for the owner's
// connection and its answer to the stream (default 5 s), within the
// node's own bound.
func WithFrameConnectTimeout(d time.Duration) FrameOption {
	return func(o *frameOptions) { o.connTimeout = d }
}

// WithFrameLogger sets where the transport logs (default slog.Default()).
func WithFrameLogger(l *slog.Logger) FrameOption {
	return func(o *frameOptions) { o.logger = l }
}

// FrameTransport is the gRPC frame transport (ext.FrameTransport), key
// "grpc-stream". Give it to a node with streaming.WithFrameTransport (or
// velo.WithFrameTransport); both ends of a stream need it.
//
// The consumer's node serves /velo.streaming.v1.VeloStreaming/Stream on a
// listener of its own, apart from the gRPC messenger transport's (key
// "grpc"), and advertises it under "grpc-stream" in the TCP transport's
// entry format. A producer opens one call per stream on a connection of
// its own, naming the stream in the metadata x-anchor-id and x-session-id
// (decimal u64 strings), and sends one FramedData message per frame, the
// frame in payload, preamble and header empty. The call is used
// client-streaming: the server sends no message, and ends the call once
// it took the whole request stream. A producer that sent its terminal
// closes its side and waits for that end: a clean end within the ack
// timeout (20 s) retires the stream Sent, anything else Discarded.
// A missing or bad route in the metadata is refused InvalidArgument, an
// unbound one NotFound.
//
// Messages are limited to MaxStreamFrame plus the message's few bytes of
// framing on both ends (grpc-go's MaxRecvMsgSize and MaxSendMsgSize). The
// transport runs in the clear unless built WithFrameTLS.
type FrameTransport struct {
	o   frameOptions
	tls *tls.Config // checked and cloned; nil in the clear
	err error       // a config refused: Listen and Dial return it
}

// NewFrameTransport returns a gRPC frame transport. A TLS config that
// WithFrameTLS cannot take (no certificate, a version below 1.2) makes
// Listen and Dial fail with the reason, so a node built with it fails to
// start.
func NewFrameTransport(opts ...FrameOption) *FrameTransport {
	o := frameOptions{ackTimeout: DefaultTerminalAckTimeout, connTimeout: defaultConnTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.listen == nil {
		o.listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	t := &FrameTransport{o: o}
	t.tls, t.err = checkTLS(o.tls)
	return t
}

// Key is "grpc-stream".
func (t *FrameTransport) Key() ext.TransportKey { return FrameKey }

// MaxFrameSize is MaxStreamFrame (16 MiB).
func (t *FrameTransport) MaxFrameSize() int { return MaxStreamFrame }

// maxMsg is grpc-go's message size limit on both ends: the largest frame
// and its message's tag and length.
const maxMsg = MaxStreamFrame + msgOverhead

// Listen serves the transport's gRPC service on addr, a specific
// interface (a wildcard names none a peer could dial).
func (t *FrameTransport) Listen(addr string) (ext.FrameListener, error) {
	if t.err != nil {
		return nil, t.err
	}
	ln, err := t.o.listen(addr)
	if err != nil {
		return nil, fmt.Errorf("grpc-stream: listen: %w", err)
	}
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil || ap.Addr().IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("grpc-stream: listener %s: listen on a specific address", ln.Addr())
	}
	ip := ap.Addr().Unmap()
	entry := tcp.EncodeEndpoint([]tcp.Interface{{IP: ip.String(), Port: ap.Port(), PrefixLen: uint8(ip.BitLen())}})
	return newFrameListener(t, ln, entry), nil
}

// Dial opens the stream's call on a connection of its own and waits for
// the server's headers, or its refusal (NotFound: ErrUnknownRoute). A
// route refused after the headers closes the stream (Closed). A
// connection refused on trust fails with an error matching
// ext.ErrPeerUntrusted.
func (t *FrameTransport) Dial(ctx context.Context, entry []byte, route ext.StreamRoute) (ext.FrameSender, error) {
	if t.err != nil {
		return nil, t.err
	}
	addr, err := tcp.DialAddr(entry)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, t.o.connTimeout)
	defer cancel()
	creds := newClientCreds(t.tls)
	opts := []ggrpc.DialOption{
		ggrpc.WithTransportCredentials(creds),
		ggrpc.WithDefaultCallOptions(
			ggrpc.ForceCodecV2(codec{}),
			ggrpc.MaxCallRecvMsgSize(maxMsg),
			ggrpc.MaxCallSendMsgSize(maxMsg),
		),
		ggrpc.WithConnectParams(connectParams(t.o.connTimeout)),
		ggrpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	}
	if t.o.dial != nil {
		opts = append(opts, ggrpc.WithContextDialer(t.o.dial))
	}
	cc, err := ggrpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("grpc-stream: %s: %w", addr, err)
	}
	if err := waitReady(ctx, cc); err != nil {
		cc.Close()
		return nil, fmt.Errorf("grpc-stream: connect %s: %w", addr, creds.explain(err))
	}
	s, err := openFrameSender(ctx, t, cc, route)
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("grpc-stream: %s: %w", addr, err)
	}
	return s, nil
}
