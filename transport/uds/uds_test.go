package uds_test

import (
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/transporttest"
	"github.com/velo-go/velo/transport/uds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func factory() transporttest.Factory {
	return transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			var opts []uds.Option
			if o.Lanes > 0 {
				opts = append(opts, uds.WithLanes(o.Lanes))
			}
			if o.ChannelBytes > 0 {
				opts = append(opts, uds.WithChannelBytes(o.ChannelBytes))
			}
			if o.TeardownGrace > 0 {
				opts = append(opts, uds.WithTeardownGrace(o.TeardownGrace))
			}
			if o.MaxFrameSize > 0 {
				opts = append(opts, uds.WithMaxFrameSize(o.MaxFrameSize))
			}
			tr, err := uds.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		DialRaw: func(ep []byte) (net.Conn, error) { return net.Dial("unix", string(ep)) },
	}
}

func TestConformance(t *testing.T) { transporttest.Run(t, factory()) }
