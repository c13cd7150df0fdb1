package messenger

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// TestSendErrorCallbackRunsOffTheSender: a send failure is reported on the
// goroutine that met it, often another caller's Send. An asynchronous
// callback must not run there (a caller holding a lock across UnaryAsync
// would deadlock on its own callback), so it runs on a goroutine of its own.
func TestSendErrorCallbackRunsOffTheSender(t *testing.T) {
	m, _ := internalPair(t)
	// The callback waits for release, which is closed only once the report
	// has returned: a callback run inside the report would hold it up.
	release, ran := make(chan struct{}), make(chan error, 1)
	token, ok := m.slots.acquireAsync(1, "h", func(_ []byte, err error) {
		<-release
		ran <- err
	}, false, nil)
	if !ok {
		t.Fatal("no slot")
	}
	f := requestFrame(UnaryResponse, ResponseID{Lo: uint64(m.wid), Hi: token}, "h", nil, []byte("x"))
	returned := make(chan struct{})
	go func() {
		m.onSendError(ext.NewInstanceID(), f, ext.ErrConnectionClosed)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the failure report waited for the callback: it ran the callback itself")
	}
	close(release)
	select {
	case err := <-ran:
		if err == nil {
			t.Fatal("the callback got no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the callback never ran")
	}
}

// TestRequestFrameOwnsItsPayload: the frame handed to the transport shares
// no memory with the caller's payload, small or large.
func TestRequestFrameOwnsItsPayload(t *testing.T) {
	for _, n := range []int{0, 64, largePayload - 40, largePayload, largePayload + 1} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i)
		}
		f := requestFrame(UnaryResponse, ResponseID{Hi: 1, Lo: 2}, "h", nil, p)
		if h, err := parseRequestHeader(f.Header); err != nil || string(h.handler) != "h" {
			t.Fatalf("%d bytes: header %v", n, err)
		}
		for i := range p {
			p[i] = 0xff
		}
		for i, b := range f.Payload {
			if b != byte(i) {
				t.Fatalf("%d bytes: the frame's payload changed with the caller's buffer at %d", n, i)
			}
		}
		if len(f.Payload) != n {
			t.Fatalf("%d bytes: payload of %d", n, len(f.Payload))
		}
		if cap(f.Header) != len(f.Header) {
			t.Fatalf("%d bytes: an append to the header could overwrite the payload", n)
		}
	}
}

// TestSendErrorAfterGoodbyeIsShuttingDown: a request that a lane failed
// because its peer shut down in order (the lane's error says so) fails
// with ErrShuttingDown even before the node heard of the loss and marked
// the peer draining. A lane that dies after a goodbye fails its queued
// frames before it reports the loss, so the order is the usual one.
func TestSendErrorAfterGoodbyeIsShuttingDown(t *testing.T) {
	m, _ := internalPair(t)
	got := make(chan error, 1)
	token, ok := m.slots.acquireAsync(1, "h", func(_ []byte, err error) { got <- err }, false, nil)
	if !ok {
		t.Fatal("no slot")
	}
	f := requestFrame(UnaryResponse, ResponseID{Lo: uint64(m.wid), Hi: token}, "h", nil, []byte("x"))
	lost := fmt.Errorf("writev: use of closed network connection: %w: %w", ext.ErrPeerShutdown, ext.ErrPeerUnreachable)
	m.onSendError(ext.NewInstanceID(), f, lost)
	select {
	case err := <-got:
		if !errors.Is(err, ErrShuttingDown) {
			t.Fatalf("got %v, want an error that matches ErrShuttingDown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the callback never ran")
	}
}
