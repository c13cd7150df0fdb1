package ext_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/velo-go/velo/ext"
)

func TestMessageTypes(t *testing.T) {
	want := map[ext.MessageType]string{
		ext.Message:      "message",
		ext.Response:     "response",
		ext.Ack:          "ack",
		ext.Event:        "event",
		ext.ShuttingDown: "shutting_down",
	}
	if ext.NumMessageTypes != len(want) {
		t.Fatalf("NumMessageTypes = %d, want %d", ext.NumMessageTypes, len(want))
	}
	// The values are the frame_type byte on the wire: pin them.
	for typ, b := range map[ext.MessageType]uint8{ext.Message: 0, ext.Response: 1, ext.Ack: 2, ext.Event: 3, ext.ShuttingDown: 4} {
		if uint8(typ) != b {
			t.Errorf("%v = %d on the wire, want %d", typ, uint8(typ), b)
		}
	}
	for typ, name := range want {
		if !typ.Valid() {
			t.Errorf("%v not Valid", typ)
		}
		if typ.String() != name {
			t.Errorf("String(%d) = %q, want %q", uint8(typ), typ.String(), name)
		}
	}
	for _, bad := range []ext.MessageType{ext.MessageType(ext.NumMessageTypes), 17, 255} {
		if bad.Valid() {
			t.Errorf("%d Valid", uint8(bad))
		}
		if got, want := bad.String(), fmt.Sprintf("unknown(%d)", uint8(bad)); got != want {
			t.Errorf("String(%d) = %q, want %q", uint8(bad), got, want)
		}
	}
}

func TestFrameTooLargeError(t *testing.T) {
	var err error = &ext.FrameTooLargeError{Size: 20 << 20, Max: 16 << 20}
	if !errors.Is(err, ext.ErrFrameTooLarge) {
		t.Fatal("FrameTooLargeError does not match ErrFrameTooLarge")
	}
	if errors.Is(err, ext.ErrTransportClosed) {
		t.Fatal("FrameTooLargeError matches ErrTransportClosed")
	}
	wrapped := fmt.Errorf("send: %w", err)
	if !errors.Is(wrapped, ext.ErrFrameTooLarge) {
		t.Fatal("wrapped FrameTooLargeError does not match ErrFrameTooLarge")
	}
	var tl *ext.FrameTooLargeError
	if !errors.As(wrapped, &tl) || tl.Size != 20<<20 || tl.Max != 16<<20 {
		t.Fatalf("errors.As = %+v", tl)
	}
	if got, want := err.Error(), "velo: frame of 20971520 bytes exceeds the maximum of 16777216"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestTransportErrorsAreDistinct(t *testing.T) {
	errs := []error{ext.ErrPeerNotRegistered, ext.ErrTransportClosed, ext.ErrConnectionClosed,
		ext.ErrLaneOutOfRange, ext.ErrFrameTooLarge, ext.ErrQueueClosed, ext.ErrNoEndpoint, ext.ErrAddressMalformed}
	for i, a := range errs {
		for j, b := range errs {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v matches %v", a, b)
			}
		}
	}
}

func TestObservabilityLabels(t *testing.T) {
	if ext.Inbound.String() != "inbound" || ext.Outbound.String() != "outbound" {
		t.Errorf("Direction labels: %q %q", ext.Inbound, ext.Outbound)
	}
	if ext.Accepted.String() != "accepted" || ext.Rejected.String() != "rejected" {
		t.Errorf("FrameOutcome labels: %q %q", ext.Accepted, ext.Rejected)
	}
	want := []string{"route_failed", "draining", "malformed", "too_large", "send_failed", "unknown_peer"}
	if ext.NumRejectionReasons != len(want) {
		t.Fatalf("NumRejectionReasons = %d, want %d", ext.NumRejectionReasons, len(want))
	}
	seen := map[string]bool{}
	for i, w := range want {
		r := ext.RejectionReason(i)
		if r.String() != w {
			t.Errorf("RejectionReason(%d) = %q, want %q", i, r, w)
		}
		seen[r.String()] = true
	}
	if len(seen) != len(want) {
		t.Error("two rejection reasons share a label")
	}
	if got := ext.RejectionReason(ext.NumRejectionReasons).String(); got != "unknown" {
		t.Errorf("out of range reason = %q", got)
	}
}

// NopObservability is an Observability that records nothing and says so.
func TestNopObservability(t *testing.T) {
	var o ext.Observability = ext.NopObservability{}
	if o.Enabled() {
		t.Fatal("NopObservability.Enabled() = true")
	}
	o.Frames(ext.Inbound, ext.Message, ext.Accepted, 1, 10)
	o.Rejection(ext.RejectDraining)
	o.SendBackpressure()
	o.RegisteredPeers(1)
	o.ActiveConnections(-1)
	o.FramesWritten(ext.Message, 3)
	o.WriteDuration(0)
	o.EgressQueueWait(0)
}

// bulkOwner counts its references in bulk, as a stream transport's read
// buffer does.
type bulkOwner struct {
	countingOwner
	bulk []int
}

func (o *bulkOwner) ReleaseN(n int) { o.bulk = append(o.bulk, n) }

func TestReleaseOwnerN(t *testing.T) {
	var plain countingOwner
	ext.ReleaseOwnerN(&plain, 3)
	if got := plain.releases.Load(); got != 3 {
		t.Fatalf("an owner without ReleaseN: %d releases, want 3", got)
	}
	var bulk bulkOwner
	ext.ReleaseOwnerN(&bulk, 5)
	if len(bulk.bulk) != 1 || bulk.bulk[0] != 5 || bulk.releases.Load() != 0 {
		t.Fatalf("an owner with ReleaseN: bulk %v and %d single releases, want one ReleaseN(5)", bulk.bulk, bulk.releases.Load())
	}
	ext.ReleaseOwnerN(nil, 2)    // nothing to release
	ext.ReleaseOwnerN(&plain, 0) // nothing either
	if got := plain.releases.Load(); got != 3 {
		t.Fatalf("n = 0 released %d more", got-3)
	}
}
