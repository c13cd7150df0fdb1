package grpc

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/velo-go/velo/ext"
)

// streamServer is the handler type grpc-go checks the service against.
type streamServer interface {
	serveStream(ggrpc.ServerStream) error
}

// serviceDesc registers VeloStreaming by hand: one bidirectional method,
// no generated code.
var serviceDesc = ggrpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*streamServer)(nil),
	Streams: []ggrpc.StreamDesc{{
		StreamName:    MethodName,
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, ss ggrpc.ServerStream) error {
			return srv.(streamServer).serveStream(ss)
		},
	}},
	Metadata: "velo.proto",
}

// inStream is one inbound stream. Its reader and the handler both write on
// it (drain echoes, the goodbye); grpc-go allows one writer at a time.
type inStream struct {
	ss    ggrpc.ServerStream
	mu    sync.Mutex
	ended bool // the handler returned: no more writes
}

func (s *inStream) send(f ext.Frame) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return io.EOF
	}
	return s.ss.SendMsg(&message{out: AppendFramedData(nil, f)})
}

func (s *inStream) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
}

// serveStream runs one inbound stream. A goroutine reads it; the handler
// returns when the reader is done (the dialer half-closed, or the stream
// failed) or, at shutdown, after it said goodbye.
func (t *Transport) serveStream(ss ggrpc.ServerStream) error {
	s := &inStream{ss: ss}
	done := make(chan error, 1)
	t.readersMu.Lock()
	if t.noReaders {
		t.readersMu.Unlock()
		// The server stopped (it closed the stream's connection), and the
		// shutdown waits for no more readers: nothing here is read.
		return status.Error(codes.Unavailable, "velo: node stopped")
	}
	t.wg.Add(1)
	t.readersMu.Unlock()
	go func() {
		defer t.wg.Done()
		done <- t.readStream(s)
	}()
	select {
	case err := <-done:
		s.end()
		return err
	case <-t.bye:
		s.send(ext.Frame{Type: ext.ShuttingDown})
		s.end()
		return nil
	}
}

// readStream admits or routes each frame of an inbound stream. A message
// that is not a frame ends the stream (only that one) with InvalidArgument.
func (t *Transport) readStream(s *inStream) error {
	a := t.adapter
	for {
		var m message
		if err := s.ss.RecvMsg(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the dialer half-closed: all it sent is here
			}
			return err
		}
		f, err := ParseFramedData(m.in, t.o.maxFrame)
		obs := t.obs()
		if err != nil {
			obs.Rejection(ext.RejectMalformed)
			t.log.Debug("grpc: closed a stream that sent a malformed message", "err", err)
			return status.Error(codes.InvalidArgument, err.Error())
		}
		obs.Frames(ext.Inbound, f.Type, ext.Accepted, 1, f.Len())
		if f.Type != ext.Message {
			if !a.RouteFrame(f) {
				obs.Rejection(ext.RejectRouteFailed)
				return status.Error(codes.Unavailable, "velo: node stopped")
			}
			continue
		}
		switch a.AdmitMessage(f) {
		case ext.Draining:
			obs.Rejection(ext.RejectDraining)
			if err := s.send(ext.Frame{Type: ext.ShuttingDown, Header: f.Header}); err != nil {
				return err
			}
		case ext.Disconnected:
			obs.Rejection(ext.RejectRouteFailed)
			return status.Error(codes.Unavailable, "velo: node stopped")
		}
	}
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// connectParams is grpc-go's default exponential backoff with the
// transport's connect timeout.
func connectParams(timeout time.Duration) ggrpc.ConnectParams {
	return ggrpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: timeout}
}

// waitReady connects cc and waits, within ctx, until it is ready or fails.
func waitReady(ctx context.Context, cc *ggrpc.ClientConn) error {
	cc.Connect()
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return errors.New("connection " + s.String())
		}
		if !cc.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}
