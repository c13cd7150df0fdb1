package framepath

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// The owner's reader of each inbound stream. The producer names its route
// (anchor local id, routing session) and then sends the stream's frames;
// the reader feeds them into the anchor's inlet, the one the same-worker
// path fills.

// cancelledFirstFrameWait bounds how long a stream to a cancelled anchor
// waits for its producer's first frame before the cancel goes.
const cancelledFirstFrameWait = time.Second

func (n *Node) acceptLoop() {
	defer n.wg.Done()
	for {
		in, err := n.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			n.log.Warn("velo: stream listener", "err", err)
			select {
			case <-time.After(50 * time.Millisecond):
			case <-n.host.Stopped():
			}
			continue
		}
		if !n.trackIn(in) {
			in.Close()
			return
		}
		go n.serve(in)
	}
}

// awaitFirstFrame reads until the first frame arrives, the stream ends or
// d passes. What it reads is dropped: the anchor is over.
func awaitFirstFrame(in ext.FrameInbound, d time.Duration) {
	in.SetReadDeadline(time.Now().Add(d))
	in.Recv()
}

// serve reads one inbound stream: its route, then frames into the
// anchor's inlet until a terminal frame, the stream's end, or the
// consumer's cancel (which closes the stream).
func (n *Node) serve(in ext.FrameInbound) {
	defer n.wg.Done()
	defer n.untrackIn(in)
	route, err := in.Route()
	if err != nil {
		return
	}
	pb := n.take(route)
	if pb == nil {
		n.log.Warn("velo: stream connection for no bound stream", "anchor", route.AnchorID, "session", route.SessionID)
		in.Refuse()
		return
	}
	if pb.mpsc != nil {
		n.serveMPSC(in, pb.st.MPSC(), pb.mpsc)
		return
	}
	st, b := pb.st, pb.bind
	// Cancelled before the producer connected, or ended by a control
	// message: closing the stream is how the producer hears of it.
	gone, cancelled := st.ConnectBind(b, in)
	if gone {
		if cancelled {
			// Again, now that the producer is connected: a Rust producer
			// registers the sender that _stream_cancel names only after
			// its connection is up, so the message sent with the attach
			// answer found nothing there and its token never fired. Its
			// first frame (or a short wait) says it is registered: a
			// cancel sent at the route could still come too early.
			awaitFirstFrame(in, cancelledFirstFrameWait)
			b.signal(wire.StreamCancelHandler)
		}
		return
	}
	defer st.ClearBind(b)
	n.read(in, st, b.proxy)
}

// read feeds the frames of an SPSC stream into st's inlet until the
// stream ends.
func (n *Node) read(in ext.FrameInbound, st *inlet.State, proxy *inlet.Sender) {
	var wd watchdog
	wd.start(in, n.heartbeat)
	for {
		p, err := in.Recv()
		if timeout, fire := wd.expired(err); fire {
			n.fire(st, proxy, &wd)
			return
		} else if timeout {
			continue
		}
		if errors.Is(err, ext.ErrMalformedStream) {
			st.Terminate(proxy, wire.AppendErrorFrame(nil, wire.KindTransportError, err.Error()), false)
			return
		}
		if err != nil {
			// The stream ended without a terminal frame: the producer's
			// node died or cut it. Tell the consumer now, behind the
			// items already in the inlet.
			st.Terminate(proxy, inlet.DroppedFrame, false)
			return
		}
		switch string(p) {
		case wire.HeartbeatFrame:
			wd.frame() // never handed on: the consumer does not see it
			continue
		case wire.FinalizedFrame:
			st.Terminate(proxy, inlet.FinalizedFrame, false)
			in.Confirm()
			return
		case wire.DroppedFrame:
			st.Terminate(proxy, inlet.DroppedFrame, false)
			in.Confirm()
			return
		case wire.DetachedFrame:
			st.Terminate(proxy, inlet.DetachedFrame, true)
			in.Confirm()
			return
		}
		if isTransportError(p) {
			st.Terminate(proxy, p, false)
			in.Confirm()
			return
		}
		if err := st.Push(context.Background(), proxy, p); err != nil {
			// Cancelled or ended on the consumer's side: closing the
			// stream tells the producer.
			return
		}
		wd.frame()
	}
}

// isTransportError reports whether p is a {"TransportError": …} frame, a
// terminal.
func isTransportError(p []byte) bool {
	return len(p) > 2 && p[0] == 0x81 && p[1] == 0xae
}
