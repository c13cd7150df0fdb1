package grpc

import "github.com/velo-go/velo/ext"

// Kill stops tr as a crash would (see kill).
func Kill(tr ext.Transport) { tr.(*Transport).kill() }
