package grpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/velo-go/velo/ext"
)

// The producer's end of the gRPC frame transport: one call on a client
// connection of its own, and a goroutine blocked on the response stream,
// whose end is the server's word on the stream.

var frameStreamDesc = ggrpc.StreamDesc{StreamName: MethodName, ServerStreams: true, ClientStreams: true}

type frameSender struct {
	cc         *ggrpc.ClientConn
	cs         ggrpc.ClientStream
	cancel     context.CancelFunc // ends the call
	ackTimeout time.Duration

	respEnd error         // the response stream's end: io.EOF when clean; read after done closes
	done    chan struct{} // closed as the response stream ends
	once    sync.Once
}

// openFrameSender opens the call for route and waits, within ctx, for
// the server's headers or its refusal.
func openFrameSender(ctx context.Context, t *FrameTransport, cc *ggrpc.ClientConn, route ext.StreamRoute) (*frameSender, error) {
	sctx, cancel := context.WithCancel(context.Background()) // the call lives as long as the stream
	cs, err := cc.NewStream(metadata.NewOutgoingContext(sctx, RouteMetadata(route)), &frameStreamDesc, FullMethod)
	if err != nil {
		cancel()
		return nil, err
	}
	// The headers say a node took the call (a Go server answers them as
	// its node reads the route); a refusal before that ends the call
	// without them. ctx bounds the wait by ending the call.
	stop := context.AfterFunc(ctx, cancel)
	md, _ := cs.Header()
	if !stop() {
		cancel()
		return nil, ctx.Err()
	}
	if md == nil {
		// The call ended before any header: RecvMsg has its status.
		err := cs.RecvMsg(&message{})
		cancel()
		return nil, callError(err)
	}
	s := &frameSender{cc: cc, cs: cs, cancel: cancel, ackTimeout: t.o.ackTimeout, done: make(chan struct{})}
	go s.watch()
	return s, nil
}

// callError maps a call's end to the transport's errors.
func callError(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: the server ended the call", ext.ErrStreamClosed)
	}
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("%w: %w", ext.ErrUnknownRoute, err)
	}
	return err
}

// watch waits for the response stream's end. The server sends nothing:
// a message is read past, and the end is io.EOF (the server ended the
// call cleanly) or the call's error.
func (s *frameSender) watch() {
	defer close(s.done)
	for {
		var m message
		if err := s.cs.RecvMsg(&m); err != nil {
			s.respEnd = err
			return
		}
	}
}

// Send sends each frame as one FramedData message.
func (s *frameSender) Send(frames [][]byte) error {
	for _, f := range frames { // all checked before any leaves
		if len(f) > MaxStreamFrame {
			return fmt.Errorf("%w: stream frame of %d bytes exceeds %d", ext.ErrFrameTooLarge, len(f), MaxStreamFrame)
		}
	}
	for _, f := range frames {
		// A message of its own each time: grpc-go may hold it after
		// SendMsg returns.
		m := &message{out: AppendStreamFrame(make([]byte, 0, streamFrameSize(f)), f)}
		if err := s.cs.SendMsg(m); err != nil {
			if errors.Is(err, io.EOF) {
				// The call is over; its status is the response's end.
				<-s.done
				return callError(s.respEnd)
			}
			return err
		}
	}
	return nil
}

// Finish closes the request side and waits for the server to end the
// call: a clean end within the ack timeout is the confirmation.
func (s *frameSender) Finish(ctx context.Context) error {
	if err := s.cs.CloseSend(); err != nil {
		return err
	}
	t := time.NewTimer(s.ackTimeout)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		return ErrTerminalNotConfirmed
	case <-ctx.Done():
		return ctx.Err()
	}
	if errors.Is(s.respEnd, io.EOF) {
		return nil
	}
	return callError(s.respEnd)
}

func (s *frameSender) Closed() <-chan struct{} { return s.done }

// Close ends the call (a call not finished reads at the server as ended
// without a terminal), waits for the watcher and closes the connection.
func (s *frameSender) Close() error {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.cc.Close()
	})
	<-s.done
	return nil
}
