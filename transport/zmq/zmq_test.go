package zmq_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/transporttest"
	"github.com/velo-go/velo/transport/zmq"
)

func options(o transporttest.Options) []zmq.Option {
	var opts []zmq.Option
	if o.Lanes > 0 {
		opts = append(opts, zmq.WithLanes(o.Lanes))
	}
	if o.ChannelBytes > 0 {
		opts = append(opts, zmq.WithChannelBytes(o.ChannelBytes))
	}
	if o.TeardownGrace > 0 {
		opts = append(opts, zmq.WithTeardownGrace(o.TeardownGrace))
	}
	if o.MaxFrameSize > 0 {
		opts = append(opts, zmq.WithMaxFrameSize(o.MaxFrameSize))
	}
	return opts
}

// The whole conformance suite over loopback TCP. DialRaw is a plain TCP
// connection: its junk is not a ZMTP greeting, and the receiver closes it.
// Kill is left out: ZeroMQ keeps no liveness per peer and, like the
// reference, reports no peer lost (a lane sees its connection end and
// dials again on the next frame: TestPeerRestartIsReconnected).
func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			tr, err := zmq.New(options(o)...)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		DialRaw: func(endpoint []byte) (net.Conn, error) {
			return net.Dial("tcp", strings.TrimPrefix(string(endpoint), "tcp://"))
		},
	})
}

func startVelo(t testing.TB) *velo.Node {
	t.Helper()
	tr, err := zmq.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown(context.Background()) })
	if got := string(n.PeerInfo().Address[zmq.Key]); got != tr.Endpoint() || got == zmq.DefaultListen {
		t.Fatalf("node advertises %q, want its bound endpoint %q", got, tr.Endpoint())
	}
	return n
}

// Two velo nodes with only the ZMQ transport call each other.
func TestTwoNodesCallEachOther(t *testing.T) {
	a, b := startVelo(t), startVelo(t)
	for _, n := range []*velo.Node{a, b} {
		name := n.InstanceID().String()
		if err := n.Register(velo.UnaryHandler("who", func(c *velo.Context) ([]byte, error) {
			return append([]byte(name+":"), c.Payload...), nil
		})); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	for i, pair := range [][2]*velo.Node{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		for j := 0; j < 20; j++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := from.Unary(ctx, to.InstanceID(), "who", fmt.Appendf(nil, "%d-%d", i, j))
			cancel()
			if want := fmt.Sprintf("%s:%d-%d", to.InstanceID(), i, j); err != nil || string(resp) != want {
				t.Fatalf("call %d-%d: %q, %v; want %q", i, j, resp, err, want)
			}
		}
	}
}
