package grpc

import (
	"context"
	"net"

	"github.com/velo-go/velo/ext"
)

// Kill stops tr as a crash would (see kill).
func Kill(tr ext.Transport) { tr.(*Transport).kill() }

// WithFrameNet makes the frame transport listen and dial through these
// (a test's sockets, which it can kill).
func WithFrameNet(listen func(string) (net.Listener, error), dial func(context.Context, string) (net.Conn, error)) FrameOption {
	return func(o *frameOptions) { o.listen, o.dial = listen, dial }
}
