package muxwire

import (
	"slices"
	"testing"
)

func TestSlotIDPacking(t *testing.T) {
	for _, c := range []struct {
		index uint32
		gen   uint8
		raw   uint32
	}{
		{0, 0, 0},
		{0, 0xff, 0x000000ff},
		{1, 0, 0x00000100},
		{0x000102, 0x03, 0x00010203},
		{MaxSlotIndex, 0xff, 0xffffffff},
	} {
		s, ok := NewSlotID(c.index, c.gen)
		if !ok || uint32(s) != c.raw || s.Index() != c.index || s.Generation() != c.gen {
			t.Errorf("(%d, %d): %#08x, %v", c.index, c.gen, uint32(s), ok)
		}
	}
	if _, ok := NewSlotID(MaxSlotIndex+1, 0); ok {
		t.Error("an index past 24 bits packed")
	}
	if s := mustSlot(t, 5, 7); s.String() != "5/7" {
		t.Errorf("String %q", s.String())
	}
}

func TestSlotIDNextGenerationWraps(t *testing.T) {
	s := mustSlot(t, 0xabcdef, 0xfe)
	s = s.NextGeneration()
	if s.Index() != 0xabcdef || s.Generation() != 0xff {
		t.Fatalf("%v", s)
	}
	if s = s.NextGeneration(); s.Index() != 0xabcdef || s.Generation() != 0 {
		t.Fatalf("wrap: %v", s)
	}
}

// The raw value sorts by index first, as the book says.
func TestSlotIDSortsByIndex(t *testing.T) {
	ids := []SlotID{mustSlot(t, 2, 0), mustSlot(t, 1, 0xff), mustSlot(t, 2, 1), mustSlot(t, 0, 9)}
	slices.Sort(ids)
	var idx []uint32
	for _, s := range ids {
		idx = append(idx, s.Index())
	}
	if !slices.Equal(idx, []uint32{0, 1, 2, 2}) {
		t.Errorf("sorted indices %v", idx)
	}
}

func TestHandlerNames(t *testing.T) {
	names := HandlerNames()
	if names[0] != "_stream_batch" || names[1] != "_stream_batch.1" || names[15] != "_stream_batch.15" {
		t.Fatalf("%q", names)
	}
	for lane, n := range names {
		if HandlerName(lane) != n {
			t.Errorf("HandlerName(%d) = %q", lane, HandlerName(lane))
		}
		if l, ok := LaneOfHandler(n); !ok || l != lane {
			t.Errorf("LaneOfHandler(%q) = %d, %v", n, l, ok)
		}
	}
	for _, bad := range []int{-1, 16} {
		if HandlerName(bad) != "" {
			t.Errorf("HandlerName(%d) = %q", bad, HandlerName(bad))
		}
	}
	for _, bad := range []string{"_stream_batch.0", "_stream_batch.16", "_stream_batch.", ""} {
		if _, ok := LaneOfHandler(bad); ok {
			t.Errorf("LaneOfHandler(%q) found a lane", bad)
		}
	}
	if n := testing.AllocsPerRun(10, func() { _ = HandlerName(7) }); n != 0 {
		t.Errorf("HandlerName allocates %v", n)
	}
}

func TestTransportKeys(t *testing.T) {
	if TransportKey != "messenger-mux-v2" || ReferenceV1TransportKey != "messenger-mux-v1" {
		t.Error("transport keys changed")
	}
}

func TestNames(t *testing.T) {
	for want, got := range map[string]string{
		"Data": Data.String(), "LifecycleSlot": LifecycleSlot.String(), "RecordType(6)": RecordType(6).String(),
		"TerminalSent": TerminalSent.String(), "ProtocolError": ProtocolError.String(),
		"CloseReason(4)": CloseReason(4).String(), "Stop": Stop.String(), "Cancel": Cancel.String(),
		"LifecycleAction(2)": LifecycleAction(2).String(),
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}

func TestSeqAfter(t *testing.T) {
	for _, c := range []struct {
		a, b uint32
		want bool
	}{
		{1, 0, true},
		{0, 1, false},
		{5, 5, false},
		{0, 0xffffffff, true}, // across the wrap
		{0xffffffff, 0, false},
		{0x7fffffff, 0, true},
		{0x80000000, 0, false}, // the antipode: neither is after the other
		{0, 0x80000000, false},
	} {
		if got := SeqAfter(c.a, c.b); got != c.want {
			t.Errorf("SeqAfter(%#x, %#x) = %v", c.a, c.b, got)
		}
	}
}
