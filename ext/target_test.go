package ext_test

import (
	"testing"

	"github.com/velo-go/velo/ext"
)

// Both kinds of target satisfy ext.Target, and a switch tells them apart.
func TestTargetKinds(t *testing.T) {
	id := ext.NewInstanceID()
	for _, tc := range []struct {
		target ext.Target
		want   string
	}{{id, "instance"}, {ext.ServiceName("llm"), "service"}} {
		var got string
		switch tc.target.(type) {
		case ext.InstanceID:
			got = "instance"
		case ext.ServiceName:
			got = "service"
		}
		if got != tc.want {
			t.Errorf("%v: %s, want %s", tc.target, got, tc.want)
		}
	}
}
