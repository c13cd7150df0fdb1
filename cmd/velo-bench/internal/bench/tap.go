package bench

import "github.com/velo-go/velo/ext"

// tapped is what every transport tap of the harnesses embeds: the wrapped
// transport, and the optional interfaces a tap must pass on so that the
// node under it behaves as it would without the tap. Each tap reads a
// frame synchronously in Send and keeps nothing of it, so passing on
// RetainsOwners is safe.
type tapped struct {
	ext.Transport
}

// Unwrap returns the wrapped transport (ext.TransportWrapper), so that the
// node confirms the connections it accepts through it: without that, each
// busy new connection to the node waits at its dialer's fence for 5 s.
func (t tapped) Unwrap() ext.Transport { return t.Transport }

// RetainsOwners passes on what the wrapped transport says
// (ext.OwnerRetainer), so that the mux's pooled batches go without a copy,
// as they do without the tap.
func (t tapped) RetainsOwners() bool {
	r, ok := t.Transport.(ext.OwnerRetainer)
	return ok && r.RetainsOwners()
}
