package streaming

import (
	"context"

	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/framepath"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// sink is where a producer's frames go: the one thing a Sender or an
// MPSCSender talks to, whatever the path to the anchor. There are three
// paths, one implementation each:
//
//   - the same worker (localSink, localMPSCSink): frames go straight into
//     the anchor's inlet;
//   - the per-stream TCP connection (framepath.Stream): frames queue for the
//     connection's egress pump;
//   - the messenger mux (OutSlot): frames queue in a slot of a batcher.
//
// What differs between SPSC and MPSC lives in the implementation chosen at
// attach (on the same worker, the SenderID tag of each frame), so that the
// public sender types dispatch on nothing.
type sink interface {
	signaller

	// Push queues an item or soft-error frame, waiting while the path is
	// full: until there is room, ctx ends, or the stream is cancelled.
	Push(ctx context.Context, frame []byte) error
	// PushBytes queues the byte item of payload, as push does with
	// bytesItemFrame(payload); a path that can encode it in place (the
	// mux's arena) makes no frame of its own.
	PushBytes(ctx context.Context, payload []byte) error
	// Finish ends the producer with its terminal frame (finalizedFrame,
	// detachedFrame or droppedFrame); detach says which of the first two
	// it is for the same worker's bookkeeping. It never waits for room.
	Finish(frame []byte, detach bool) error

	// RetiredCh closes once the producer's output has an outcome, which
	// known then gives (0 before).
	RetiredCh() <-chan struct{}
	Known() RetireOutcome

	// AnchorHandle names the anchor the producer is attached to.
	AnchorHandle() AnchorHandle
	// OpsMetrics is where the producer's operations are counted (nil:
	// nowhere), and the scheme they count under.
	OpsMetrics() (*metrics.StreamingMetrics, metrics.StreamScheme)
	// Transport is the negotiated transport key, "" on the same worker.
	Transport() string
	// Ready waits for the owner's answer to a pipelined attach and
	// returns its refusal; nil at once where the attach already waited.
	Ready(ctx context.Context) error
}

// The three paths implement sink.
var (
	_ sink = (*localSink)(nil)
	_ sink = (*localMPSCSink)(nil)
	_ sink = (*framepath.Stream)(nil)
	_ sink = (*mux.OutSlot)(nil)
)
