package messenger

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/velo-go/velo/internal/msgwire"
)

// fillCall takes an asynchronous slot whose into gives buf, and records
// what its callback was told.
func fillCall(t *testing.T, tab *slotTable, buf []byte) (token uint64, got chan error) {
	t.Helper()
	got = make(chan error, 1)
	token, ok := tab.acquireAsync(1, "h", func(b []byte, err error) {
		if err == nil && (len(b) != len(buf) || &b[0] != &buf[0]) {
			err = errors.New("the answer is not the slice into gave")
		}
		got <- err
	}, true, func(n int) []byte { return buf[:n] })
	if !ok {
		t.Fatal("no slot")
	}
	return token, got
}

// While a transport writes an answer into the caller's buffer, whatever
// else ends the call is held until the write stops: the caller never has
// its buffer back while it is being written.
func TestAFillingCallEndsOnlyWhenTheWriteStops(t *testing.T) {
	tab := newSlotTable(4, nil)
	buf := make([]byte, 100)
	token, got := fillCall(t, tab, buf)
	dst := tab.beginFill(token, len(buf))
	if len(dst) != len(buf) {
		t.Fatalf("beginFill gave %d bytes", len(dst))
	}
	if tab.beginFill(token, len(buf)) != nil {
		t.Fatal("a second fill of the same call was allowed")
	}
	if !tab.deliver(token, reply{err: context.Canceled}) {
		t.Fatal("the cancel was not taken")
	}
	select {
	case err := <-got:
		t.Fatalf("the call ended while its answer was being written: %v", err)
	default:
	}
	tab.endFill(msgwire.ResponseID{Hi: token}, dst, nil)
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("the call ended with %v, want the held cancel", err)
	}
}

// A fill that completes delivers the slice; one cut short fails the call
// with ErrPeerUnreachable.
func TestAFillDeliversItsSliceOrTheCut(t *testing.T) {
	tab := newSlotTable(4, nil)
	buf := make([]byte, 100)
	token, got := fillCall(t, tab, buf)
	tab.endFill(msgwire.ResponseID{Hi: token}, tab.beginFill(token, len(buf)), nil)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	token, got = fillCall(t, tab, buf)
	tab.endFill(msgwire.ResponseID{Hi: token}, tab.beginFill(token, len(buf)), io.ErrUnexpectedEOF)
	if err := <-got; !errors.Is(err, ErrPeerUnreachable) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut fill ended with %v", err)
	}
}
