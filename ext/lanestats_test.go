package ext_test

import (
	"testing"

	"github.com/velo-go/velo/ext"
)

// statsTransport is a transport that reports one lane; wrapped hides it
// behind a wrapper, as a counting or tracing transport would.
type statsTransport struct{ ext.Transport }

func (statsTransport) LaneStats(ext.InstanceID) []ext.LaneStats {
	return []ext.LaneStats{{Lane: 0, Connected: true, FramesWritten: 7}}
}

type wrapped struct{ ext.Transport }

func (w wrapped) Unwrap() ext.Transport { return w.Transport }

func TestLaneStatserOfLooksThroughWrappers(t *testing.T) {
	inner := statsTransport{}
	ls, ok := ext.LaneStatserOf(wrapped{wrapped{inner}})
	if !ok {
		t.Fatal("no LaneStatser found under two wrappers")
	}
	if got := ls.LaneStats(ext.InstanceID{}); len(got) != 1 || got[0].FramesWritten != 7 {
		t.Fatalf("LaneStats = %+v, want the inner transport's", got)
	}
	if _, ok := ext.LaneStatserOf(wrapped{}); ok {
		t.Fatal("a wrapper of nothing has a LaneStatser")
	}
	if _, ok := ext.LaneStatserOf(nil); ok {
		t.Fatal("nil has a LaneStatser")
	}
}
