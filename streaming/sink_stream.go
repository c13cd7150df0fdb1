package streaming

import (
	"context"

	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// remoteSender is the sink of the per-stream TCP path, for an SPSC Sender
// and an MPSC producer alike: the owner knows which producer a connection
// carries, so its frames need no tag.

// PushBytes makes the frame: the pump writes queued frames as they are.
func (rs *remoteSender) PushBytes(ctx context.Context, payload []byte) error {
	return rs.Push(ctx, bytesItemFrame(payload))
}

// Finish queues the terminal; the owner's side tells a detach by its frame.
func (rs *remoteSender) Finish(frame []byte, _ bool) error { return rs.terminate(frame) }

func (rs *remoteSender) AnchorHandle() AnchorHandle { return rs.handle }

func (rs *remoteSender) OpsMetrics() (*metrics.StreamingMetrics, metrics.StreamScheme) {
	return rs.r.m.met, metrics.SchemeOf(rs.key)
}

// Transport is the key the owner answered the attach with ("tcp-stream").
func (rs *remoteSender) Transport() string { return rs.key }

// Ready is nil: the per-stream attach waits for its answer.
func (rs *remoteSender) Ready(context.Context) error { return nil }

func (rs *remoteSender) SignalCh(k inlet.SignalKind) <-chan struct{} {
	switch k {
	case inlet.SigStop:
		return rs.stopCh
	case inlet.SigCancel:
		return rs.cancelCh
	}
	return rs.doneCh
}
