package tcppath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// The owner's reader of each per-stream connection. The producer writes
// the 16-byte preamble (anchor local id, routing session) and then the
// stream's frames as messenger frames with an empty header; the reader
// feeds them into the anchor's inlet, the one the same-worker path fills.

// preambleTimeout bounds how long a connection may take to send its
// preamble (the reference's TOKEN_READ_TIMEOUT); it also bounds the dial.
const preambleTimeout = 20 * time.Second

// cancelledFirstFrameWait bounds how long a connection to a cancelled
// anchor waits for its producer's first frame before the cancel goes.
const cancelledFirstFrameWait = time.Second

func (n *Node) acceptLoop() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept()
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
		if !n.track(c, 1) {
			c.Close()
			return
		}
		go n.serve(c)
	}
}

// awaitFirstFrame reads until the first frame arrives, the connection ends
// or d passes. What it reads is dropped: the anchor is over.
func awaitFirstFrame(c net.Conn, d time.Duration) {
	c.SetReadDeadline(time.Now().Add(d))
	fr := frame.NewReader(c, wire.MaxTCPFrame)
	defer fr.Close()
	if f, err := fr.Next(); err == nil {
		f.Release()
	}
}

// serve reads one per-stream connection: the preamble, then frames into
// the anchor's inlet until a terminal frame, the connection's end, or the
// consumer's cancel (which closes the connection).
func (n *Node) serve(c net.Conn) {
	defer n.wg.Done()
	defer n.untrack(c)
	var pre [wire.TCPPreambleLen]byte
	c.SetReadDeadline(time.Now().Add(preambleTimeout))
	if _, err := io.ReadFull(c, pre[:]); err != nil {
		return
	}
	key, _ := wire.DecodeTCPPreamble(pre[:])
	pb := n.take(key)
	if pb == nil {
		n.log.Warn("velo: stream connection for no bound stream", "anchor", key.AnchorID, "session", key.SessionID)
		return
	}
	if pb.mpsc != nil {
		n.serveMPSC(c, pb.st.MPSC(), pb.mpsc)
		return
	}
	st, b := pb.st, pb.bind
	// Cancelled before the producer connected, or ended by a control
	// message: closing the connection is how the producer hears of it.
	gone, cancelled := st.ConnectBind(b, c)
	if gone {
		if cancelled {
			// Again, now that the producer is connected: a Rust producer
			// registers the sender that _stream_cancel names only after
			// its connection is up, so the message sent with the attach
			// answer found nothing there and its token never fired. Its
			// first frame (or a short wait) says it is registered: a
			// cancel sent at the preamble could still come too early.
			awaitFirstFrame(c, cancelledFirstFrameWait)
			b.signal(wire.StreamCancelHandler)
		}
		return
	}
	defer st.ClearBind(b)
	n.read(c, st, b.proxy)
}

// read feeds the frames of an SPSC stream's connection into st's inlet
// until the stream ends.
func (n *Node) read(c net.Conn, st *inlet.State, proxy *inlet.Sender) {
	fr := frame.NewReader(c, wire.MaxTCPFrame)
	defer fr.Close()
	var wd watchdog
	wd.start(c, n.heartbeat)
	for {
		f, err := fr.Next()
		if timeout, fire := wd.expired(err); fire {
			n.fire(st, proxy, &wd)
			return
		} else if timeout {
			continue
		}
		if err != nil {
			// The connection ended without a terminal frame: the
			// producer's node died or cut it. Tell the consumer now,
			// behind the items already in the inlet.
			st.Terminate(proxy, inlet.DroppedFrame, false)
			return
		}
		if f.Type != ext.Message || len(f.Header) != 0 {
			msg := fmt.Sprintf("per-stream frame of type %d with a %d-byte header", f.Type, len(f.Header))
			st.Terminate(proxy, wire.AppendErrorFrame(nil, wire.KindTransportError, msg), false)
			return
		}
		p := f.Payload
		switch string(p) {
		case wire.HeartbeatFrame:
			wd.frame() // never handed on: the consumer does not see it
			continue
		case wire.FinalizedFrame:
			st.Terminate(proxy, inlet.FinalizedFrame, false)
			return
		case wire.DroppedFrame:
			st.Terminate(proxy, inlet.DroppedFrame, false)
			return
		case wire.DetachedFrame:
			st.Terminate(proxy, inlet.DetachedFrame, true)
			return
		}
		if len(p) > 0 && p[0] == 0x81 && len(p) > 2 && p[1] == 0xae { // {"TransportError": …}
			st.Terminate(proxy, p, false)
			return
		}
		if err := st.Push(context.Background(), proxy, p); err != nil {
			// Cancelled or ended on the consumer's side: closing the
			// connection tells the producer.
			return
		}
		wd.frame()
	}
}
