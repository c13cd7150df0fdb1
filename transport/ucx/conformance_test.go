package ucx

import (
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/transporttest"
)

// suiteOptions maps the suite's options to ours. The suite sends 8 MiB
// frames with the defaults, so a zero MaxFrameSize means the largest
// eager max, not the 1 MiB default.
func suiteOptions(o transporttest.Options) []Option {
	opts := []Option{WithEagerMax(MaxEagerMax)}
	if o.MaxFrameSize > 0 {
		opts = append(opts, WithEagerMax(o.MaxFrameSize))
	}
	if o.Lanes > 0 {
		opts = append(opts, WithLanes(o.Lanes))
	}
	if o.ChannelBytes > 0 {
		opts = append(opts, WithChannelBytes(o.ChannelBytes))
	}
	if o.TeardownGrace > 0 {
		opts = append(opts, WithTeardownGrace(o.TeardownGrace))
	}
	return opts
}

// The conformance suite over the fake worker: everything above the cgo
// binding (gates, lanes, the window of posted sends, the inbox's push
// back, the drain echo through a stranger's hello, peer loss). Kill is a
// crash of the fake worker: every endpoint to it fails at once. There is
// no byte stream to write junk on (DialRaw); malformed AMs are tested on
// their own.
func TestConformanceFake(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			return newFake(t, suiteNet(t), suiteOptions(o)...)
		},
		Kill: func(tr ext.Transport) { tr.(*Transport).fake().kill() },
	})
}

// suiteNet is the fake network the transports of one suite test share.
func suiteNet(t testing.TB) *fakeNet {
	if n, ok := nets[t.Name()]; ok {
		return n
	}
	n := newFakeNet()
	nets[t.Name()] = n
	t.Cleanup(func() { delete(nets, t.Name()) })
	return n
}

var nets = map[string]*fakeNet{}
