package tcp

import "github.com/velo-go/velo/ext"

// Kill stops a TCP transport as a crash would, for the conformance
// suite's peer-loss test.
func Kill(tr ext.Transport) { tr.(*Transport).s.Kill() }
