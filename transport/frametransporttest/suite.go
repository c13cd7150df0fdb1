// Package frametransporttest is the conformance suite for frame
// transports (ext.FrameTransport): the rules of the interface that a
// node's per-stream path relies on, checked against real instances of the
// transport.
//
// Every frame transport of this module runs it (TCP, TLS, gRPC), and one
// written outside the module should too:
//
//	func TestFrameConformance(t *testing.T) {
//		frametransporttest.Run(t, frametransporttest.Factory{
//			New: func(t testing.TB) ext.FrameTransport { return mytransport.New() },
//		})
//	}
//
// The suite checks order, frames up to the limit, a frame over the limit
// refused at send, many concurrent streams, a route the listener refuses,
// the consumer's close seen by the producer, the delivery confirmation of
// Finish, the read deadline, a producer that goes away mid-stream, a
// listener closed with streams open, and, with DialRaw, malformed input.
// Each test starts its own transports; the suite takes a few seconds.
package frametransporttest

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// Factory builds transports for the suite.
type Factory struct {
	// New builds a transport. The suite listens on one and dials from
	// another built by the same New.
	New func(t testing.TB) ext.FrameTransport
	// ListenAddr is what the suite passes to Listen ("127.0.0.1:0" when
	// empty).
	ListenAddr string
	// Confirms says Finish waits for the far end's word (gRPC), so that
	// a consumer's close before Confirm makes Finish fail. Without it
	// (TCP) Finish only reports the terminal's write.
	Confirms bool
	// DialRaw opens a stream for route to the listener entry advertises
	// that carries each Write as it is (a byte stream's bytes after the
	// route, or one message of a message transport), for feeding the
	// listener bad input. Nil skips the malformed-input test.
	DialRaw func(ctx context.Context, entry []byte, route ext.StreamRoute) (io.WriteCloser, error)
	// Malformed are the inputs DialRaw's writer carries in that test,
	// each of which is no frame: a bad prefix, a length with nothing
	// behind it, a message that does not decode. The listener must end
	// such a stream promptly (Recv fails) and never hand out a frame.
	Malformed [][]byte
	// Kill ends everything ft holds as the death of its process would:
	// the sockets under its listeners, the streams it accepted and those
	// it dialed close at once (a reset where the network has one), with
	// nothing of an orderly end said above them. The suite kills the
	// listening transport to check that a producer sees a consumer that
	// died, and the dialing one for the reverse. Nil skips those tests.
	Kill func(ft ext.FrameTransport)
}

// Run runs the suite against the transports f builds.
func Run(t *testing.T, f Factory) {
	t.Helper()
	if f.ListenAddr == "" {
		f.ListenAddr = "127.0.0.1:0"
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"order", testOrder},
		{"frames-up-to-the-limit", testLimit},
		{"frame-over-the-limit", testOverLimit},
		{"concurrent-streams", testConcurrent},
		{"unknown-route", testUnknownRoute},
		{"consumer-close", testConsumerClose},
		{"finish-confirmation", testFinish},
		{"read-deadline", testDeadline},
		{"producer-gone", testProducerGone},
		{"listener-closed-with-streams-open", testShutdown},
		{"malformed-input", testMalformed},
		{"consumer-dies", testConsumerDies},
		{"producer-dies", testProducerDies},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, f) })
	}
}

// prompt bounds what the suite waits for a signal that must come
// promptly: far below TCP's retransmission timeouts, far above a loaded
// machine's scheduling.
const prompt = 10 * time.Second
