package framepath

import (
	"errors"
	"os"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// The watchdog of the owner's readers (the reader pump's watchdog in the
// reference's tcp_transport.rs).
//
// Each stream's reader watches its connection with the read deadline, the
// one timer of the stream: it moves the deadline only when it is within
// half a window of the last frame, and a frame that is read wins over a
// deadline that passed. After wire.DetectionMultiplier windows with no frame it
// ends the stream with ErrSenderDropped, counts the firing
// (streamx.WatchdogFirings) and logs one warning.

// watchdog is the silence detector of one stream's reader. It is used by
// that reader's goroutine only.
type watchdog struct {
	in       ext.FrameInbound
	window   time.Duration
	last     time.Time // when the last frame was forwarded (or the stream began)
	deadline time.Time // the connection's read deadline
	misses   int       // dead windows since last
}

// start arms the deadline one window from now: the stream has just named
// its route.
func (w *watchdog) start(in ext.FrameInbound, window time.Duration) {
	w.in, w.window = in, window
	w.last = time.Now()
	w.deadline = w.last.Add(window)
	in.SetReadDeadline(w.deadline)
}

// frame stamps a frame that was forwarded, moving the deadline only when
// it is within half a window: under steady traffic it moves at most twice
// per window.
func (w *watchdog) frame() {
	now := time.Now()
	w.last, w.misses = now, 0
	if w.deadline.Sub(now) < w.window/2 {
		w.deadline = now.Add(w.window)
		w.in.SetReadDeadline(w.deadline)
	}
}

// expired reports whether err is the read deadline passing, and if so
// whether that ends the stream: wire.DetectionMultiplier windows after the last
// frame. Otherwise it re-arms the deadline and the read goes on (the
// frame reader keeps a partial frame across the timeout).
func (w *watchdog) expired(err error) (timeout, fire bool) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false, false
	}
	now := time.Now()
	// A window is dead only if no frame came in it: the deadline was not
	// moved for frames that came while it was more than half a window
	// away.
	w.misses = int(now.Sub(w.last) / w.window)
	if w.misses >= wire.DetectionMultiplier {
		return true, true
	}
	w.deadline = w.last.Add(time.Duration(w.misses+1) * w.window)
	w.in.SetReadDeadline(w.deadline)
	return true, false
}

// fire ends st's stream on the watchdog: Dropped behind what the inlet
// holds (terminals go past its capacity, so it is never lost), one count
// and one warning with the stream's depths.
func (n *Node) fire(st *inlet.State, proxy *inlet.Sender, w *watchdog) {
	depth := st.Depth()
	n.firings.Add(1)
	if met := n.met; met != nil {
		met.WatchdogFiring()
	}
	n.log.Warn("velo: stream heartbeat watchdog fired, injecting Dropped (saturation indicator: a full inlet means a slow consumer)",
		"local_id", st.Handle().LocalID(),
		"anchor_inlet_len", depth,
		"anchor_inlet_cap", st.Cap(),
		"silent_ms", time.Since(w.last).Milliseconds(),
		"heartbeat_deadline_ms", w.window.Milliseconds(),
		"detection_multiplier", wire.DetectionMultiplier)
	st.Terminate(proxy, inlet.DroppedFrame, false)
}
