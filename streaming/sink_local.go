package streaming

import (
	"context"

	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// localSink is the sink of a producer on the anchor's own worker: its
// frames go straight into the anchor's inlet, under the anchor's lock. The
// inlet.Sender is what the inlet reads of the producer.
type localSink struct {
	inlet.Sender
}

// localMPSCSink is localSink for one producer of an MPSC anchor: each of
// its frames enters the inlet tagged with its SenderID, and its end is
// the anchor's count of producers too.
type localMPSCSink struct {
	localSink
	id SenderID
}

// localSender is a same-worker Sender and its sink in one allocation, so
// that the sink costs an attach nothing beyond the Sender itself.
type localSender[T any] struct {
	Sender[T]
	in localSink
}

// newLocalSender returns the Sender of a producer attached to st on this
// worker. The caller has marked st attached.
func newLocalSender[T any](st *inlet.State, encode func(T) ([]byte, error)) *Sender[T] {
	ls := &localSender[T]{}
	ls.in.Init(st, false)
	ls.Sender.encode = encode
	ls.Sender.sink = &ls.in
	return &ls.Sender
}

// localMPSCSender is localSender for an MPSC producer.
type localMPSCSender[T any] struct {
	MPSCSender[T]
	in localMPSCSink
}

// newLocalMPSCSender returns the MPSCSender of producer id, attached to the
// MPSC anchor st on this worker.
func newLocalMPSCSender[T any](st *inlet.State, id SenderID, encode func(T) ([]byte, error)) *MPSCSender[T] {
	ls := &localMPSCSender[T]{}
	ls.in.Init(st, false)
	ls.in.id = id
	ls.MPSCSender.id = id
	ls.MPSCSender.encode = encode
	ls.MPSCSender.sink = &ls.in
	return &ls.MPSCSender
}

func (s *localSink) SignalCh(k inlet.SignalKind) <-chan struct{} { return s.State().Signal(k) }
func (s *localSink) Cause() error                                { return s.State().Cause() }
func (s *localSink) WatchFire(fn func(error)) error              { return s.State().WatchFire(fn) }

func (s *localSink) Push(ctx context.Context, frame []byte) error {
	return s.State().Push(ctx, &s.Sender, frame)
}

// PushBytes makes the frame: the inlet keeps frames, not payloads.
func (s *localSink) PushBytes(ctx context.Context, payload []byte) error {
	return s.Push(ctx, bytesItemFrame(payload))
}

func (s *localSink) Finish(frame []byte, detach bool) error {
	_, err := s.State().Terminate(&s.Sender, frame, detach)
	return err
}

func (s *localSink) AnchorHandle() AnchorHandle { return s.State().Handle() }

func (s *localSink) OpsMetrics() (*metrics.StreamingMetrics, metrics.StreamScheme) {
	return managerOf(s.State()).met, metrics.SchemeLocal
}

// Transport is "": no transport is involved on the same worker.
func (s *localSink) Transport() string { return "" }

// Ready is nil: a same-worker attach is answered before it returns.
func (s *localSink) Ready(context.Context) error { return nil }

func (s *localMPSCSink) Push(ctx context.Context, frame []byte) error {
	return s.State().MPSC().Push(ctx, &s.Sender, s.id, frame)
}

func (s *localMPSCSink) PushBytes(ctx context.Context, payload []byte) error {
	return s.Push(ctx, bytesItemFrame(payload))
}

// Finish ignores detach: an MPSC producer's Detached and Dropped frames
// both leave the stream open, and the anchor counts either as a departure.
func (s *localMPSCSink) Finish(frame []byte, _ bool) error {
	_, err := s.State().MPSC().Terminate(&s.Sender, s.id, frame)
	return err
}
