package ucx

import "testing"

// Peer error handling goes off by itself where UCX 1.13 has none: when
// the UCX_TLS in force (the environment's, else WithTLS's) names only
// shared memory.
func TestPeerErrorsOffOverSharedMemoryOnly(t *testing.T) {
	for _, c := range []struct {
		env, with string
		asked     bool
		want      bool
	}{
		{"", "", false, false},
		{"tcp", "", false, false},
		{"sm,self", "", false, true},
		{"", "sm,self", false, true},
		{"tcp", "sm,self", false, false}, // the environment wins, as in UCX
		{"sm,self,tcp", "", false, false},
		{"tcp", "", true, true},
	} {
		t.Setenv("UCX_TLS", c.env)
		o := options{tls: c.with, noPeerErrors: c.asked}
		if got := o.peerErrorsOff(); got != c.want {
			t.Errorf("UCX_TLS=%q, WithTLS(%q), WithoutPeerErrors %v: off = %v, want %v", c.env, c.with, c.asked, got, c.want)
		}
	}
}
