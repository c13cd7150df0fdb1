package tcp_test

import (
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
	"github.com/velo-go/velo/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func factory() transporttest.Factory { return factoryWith() }

// factoryWith is the suite's factory for transports built with base and
// the options the suite asks for.
func factoryWith(base ...tcp.Option) transporttest.Factory {
	return transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			tr, err := tcp.New(append(suiteOptions(o), base...)...)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		DialRaw: func(ep []byte) (net.Conn, error) { return dialRaw(ep) },
		Kill:    tcp.Kill,
	}
}

// suiteOptions turns the suite's options into the transport's.
func suiteOptions(o transporttest.Options) []tcp.Option {
	var opts []tcp.Option
	if o.Lanes > 0 {
		opts = append(opts, tcp.WithLanes(o.Lanes))
	}
	if o.ChannelBytes > 0 {
		opts = append(opts, tcp.WithChannelBytes(o.ChannelBytes))
	}
	if o.TeardownGrace > 0 {
		opts = append(opts, tcp.WithTeardownGrace(o.TeardownGrace))
	}
	if o.MaxFrameSize > 0 {
		opts = append(opts, tcp.WithMaxFrameSize(o.MaxFrameSize))
	}
	return opts
}

func TestConformance(t *testing.T) { transporttest.Run(t, factory()) }

// dialRaw dials a node's TCP address entry as a bare socket.
func dialRaw(ep []byte) (net.Conn, error) {
	addr, err := tcp.DialAddr(ep)
	if err != nil {
		return nil, err
	}
	return net.Dial("tcp", addr)
}
