package quic_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/quic"
	"github.com/velo-go/velo/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func factory() transporttest.Factory {
	return transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			var opts []quic.Option
			if o.Lanes > 0 {
				opts = append(opts, quic.WithLanes(o.Lanes))
			}
			if o.ChannelBytes > 0 {
				opts = append(opts, quic.WithChannelBytes(o.ChannelBytes))
			}
			if o.TeardownGrace > 0 {
				opts = append(opts, quic.WithTeardownGrace(o.TeardownGrace))
			}
			if o.MaxFrameSize > 0 {
				opts = append(opts, quic.WithMaxFrameSize(o.MaxFrameSize))
			}
			tr, err := quic.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		DialRaw: quic.DialRaw,
		Kill:    quic.Kill,
	}
}

func TestConformance(t *testing.T) { transporttest.Run(t, factory()) }
