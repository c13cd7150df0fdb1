package grpc

import (
	"context"
	"sync/atomic"
	"testing"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/velo-go/velo/ext"
)

// lateStream is a server stream whose handler runs after the server
// stopped: its context is done and nothing can be read from it.
type lateStream struct {
	ggrpc.ServerStream
	ctx   context.Context
	reads atomic.Int64
}

func (s *lateStream) Context() context.Context { return s.ctx }

func (s *lateStream) RecvMsg(any) error {
	s.reads.Add(1)
	<-s.ctx.Done()
	return status.FromContextError(s.ctx.Err()).Err()
}

func (s *lateStream) SendMsg(any) error { return status.Error(codes.Unavailable, "stopped") }

// grpc-go's Stop does not wait for the handlers it already started, so a
// stream's handler can begin after the shutdown waited for the readers
// (and Closed reported the transport done). Such a handler starts no
// reader: its wg.Add would race that wait, and the reader would outlive
// Closed. (The frame listener had the same bug: commit 4896827.)
func TestAStreamHandlerAfterTheStopStartsNoReader(t *testing.T) {
	tr, err := New()
	if err != nil {
		t.Fatal(err)
	}
	a := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{})
	defer a.Close()
	if _, err := tr.Start(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	tr.kill()
	<-tr.Closed()
	ctx, cancel := context.WithCancel(context.Background())
	s := &lateStream{ctx: ctx}
	err = tr.serveStream(s)
	cancel()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("the late handler returned %v, want Unavailable", err)
	}
	tr.wg.Wait() // a reader it started ends with the stream's context
	if n := s.reads.Load(); n != 0 {
		t.Errorf("the late handler read the stream %d times after Closed", n)
	}
}
