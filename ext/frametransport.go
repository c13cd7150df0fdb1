package ext

import (
	"context"
	"errors"
	"net"
	"time"
)

// Frame transports carry streams off the messenger: the per-stream path,
// where each stream between two workers has a channel of its own (a TCP
// connection, a gRPC call, ...). The node runs the path (its bind table,
// heartbeats, watchdog, retirement and control messages) and a
// FrameTransport moves the stream's frames, one message per frame, in
// order. A frame is an opaque payload to the transport: the stream frame
// encoding (items, heartbeats, terminal sentinels) is the node's.
//
// The consumer's node listens (FrameTransport.Listen) and advertises the
// listener's entry in its WorkerAddress under the transport's Key. An
// attach binds a stream on that node to a StreamRoute and answers with the
// key; the producer's node reads the owner's entry from its PeerInfo and
// dials it with the route (FrameTransport.Dial). The consumer's node
// accepts the stream (FrameListener.Accept), reads its route and then
// its frames.

// StreamRoute names a bound stream on a consumer's frame listener: the
// anchor's local id and the routing session the owner drew for the
// attach. A stream whose route the owner did not bind is refused.
type StreamRoute struct {
	AnchorID  uint64
	SessionID uint64
}

var (
	// ErrUnknownRoute is the refusal of a stream whose route names no
	// bound stream on the listener (FrameInbound.Refuse). A dialer that
	// learns of it returns (or fails with) an error that matches it.
	ErrUnknownRoute = errors.New("velo: no stream bound to this route")
	// ErrMalformedStream is returned by FrameInbound.Route and Recv for
	// input that is not the transport's format: the stream cannot go on.
	ErrMalformedStream = errors.New("velo: malformed frame stream")
	// ErrStreamClosed is returned by a FrameSender used after the far end
	// closed the stream, or after Close.
	ErrStreamClosed = errors.New("velo: frame stream closed")
)

// FrameTransport moves the frames of per-stream streams. A node uses one
// (streaming.WithFrameTransport; TCP by default). Its methods may be
// called from any goroutine.
type FrameTransport interface {
	// Key names the transport in a WorkerAddress and in attach answers
	// ("tcp-stream", "grpc-stream", ...). Both ends of a stream must use
	// a transport of the same key.
	Key() TransportKey
	// MaxFrameSize is the largest frame payload the transport carries.
	// The node refuses a larger item at send (streaming's
	// ItemTooLargeError) before anything leaves; the receiving end must
	// take every frame up to it.
	MaxFrameSize() int
	// Listen opens the consumer's end. addr is the node's listen address
	// (streaming.WithStreamListenAddr, "127.0.0.1:0" by default); a
	// transport that needs none may ignore it. The node calls it once.
	Listen(addr string) (FrameListener, error)
	// Dial opens a stream to the listener that entry (the owner's
	// address entry under Key) advertises, for route. It returns once the
	// stream can take frames, or with an error; ctx bounds it. A
	// transport that learns the listener refused the route at dial
	// returns an error matching ErrUnknownRoute; one that learns it later
	// closes the stream (FrameSender.Closed).
	Dial(ctx context.Context, entry []byte, route StreamRoute) (FrameSender, error)
}

// FrameListener is the consumer's end of a FrameTransport: it hands over
// the streams that dialers open on it.
type FrameListener interface {
	// Entry is the address entry that advertises the listener: what a
	// dialer gets as Dial's entry.
	Entry() []byte
	// Addr is the listener's network address, or nil when it has none.
	Addr() net.Addr
	// Accept waits for the next inbound stream. After Close it returns
	// an error matching net.ErrClosed; other errors are temporary, and
	// the node accepts again after a short pause.
	Accept() (FrameInbound, error)
	// Close stops accepting and ends every inbound stream not yet ended:
	// their Recv fails and their dialers see them closed. Close is
	// idempotent.
	Close() error
}

// FrameInbound is one inbound stream, read by one goroutine of the node.
// The node calls Route first, then Recv until the stream ends, and ends
// it with exactly one of Confirm, Refuse or Close (Close may follow
// either, and does nothing then).
type FrameInbound interface {
	// Route waits for the route the dialer named and returns it. A
	// transport that reads it off the wire bounds the wait itself (TCP:
	// 20 s) and fails with an error matching ErrMalformedStream for
	// bytes that are not a route.
	Route() (StreamRoute, error)
	// Recv returns the next frame payload. The slice is the node's to
	// keep (it may hold it in the anchor's queue): the transport never
	// writes to its bytes again. Recv returns io.EOF once the dialer ended
	// the stream in order and everything it sent was read, another error
	// when the stream failed or ended otherwise (the node reads either
	// without a terminal frame as the producer's loss), an error
	// matching ErrMalformedStream for input that is not a frame, and an
	// error matching os.ErrDeadlineExceeded when the read deadline
	// passes; after the last the stream is intact and Recv may be called
	// again (a partial frame is kept).
	Recv() ([]byte, error)
	// SetReadDeadline bounds the Recv calls that follow, as
	// net.Conn.SetReadDeadline does; the zero time means no bound. The
	// node's heartbeat watchdog moves it at most twice per heartbeat
	// interval.
	SetReadDeadline(t time.Time) error
	// Confirm ends the stream once the node took its terminal frame: the
	// dialer learns that its stream was taken in whole (its Finish
	// returns nil). A transport without a confirmation releases the
	// stream as Close does.
	Confirm() error
	// Refuse ends a stream whose route names no bound stream: the dialer
	// fails with an error matching ErrUnknownRoute, or sees the stream
	// closed.
	Refuse() error
	// Close ends the stream before its terminal: the consumer cancelled,
	// or the node is shutting down. The dialer must observe it promptly
	// (FrameSender.Closed), and its Finish must fail. Close unblocks a
	// Recv in progress. It is idempotent.
	Close() error
}

// FrameSender is the producer's end of a stream, driven by one goroutine
// of the node (its pump) apart from Closed and Close.
type FrameSender interface {
	// Send writes frames in order behind those sent before, as one write
	// where the transport can (the node batches what queued while the
	// last write was out). A batch with a frame over MaxFrameSize fails
	// with an error matching ErrFrameTooLarge before any of it leaves
	// (the node checks sizes before it queues, so this is a backstop).
	// Send may return before the frames reach the far end, and the
	// frames' bytes are the transport's until it returns. Another error
	// means the stream failed: the node sends nothing more on it.
	Send(frames [][]byte) error
	// Finish is called once, after the Send that carried the terminal
	// frame. It returns nil once the transport knows the far end took the
	// whole stream (TCP: the terminal's write succeeded; gRPC: the server
	// ended the call cleanly), and an error otherwise: the stream's
	// output then counts as discarded. ctx bounds the wait; a transport
	// may bound it more tightly (gRPC: 20 s).
	Finish(ctx context.Context) error
	// Closed is closed once the stream is over: the far end closed it
	// (the consumer cancelled, or its node went), it failed, or Close was
	// called. From then on a Send in progress or to come fails. The node
	// reads it as the consumer's loss unless the stream's terminal went
	// out first.
	Closed() <-chan struct{}
	// Close releases the stream; one not finished is abandoned, and the
	// far end reads it as ended without a terminal. Close unblocks a Send
	// or Finish in progress, waits for the sender's goroutines and is
	// idempotent.
	Close() error
}
