//go:build ucx

package ucx

import (
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/transporttest"
)

// newReal builds a transport on a real UCX worker, over TCP unless the
// environment's UCX_TLS says otherwise.
func newReal(t testing.TB, opts ...Option) *Transport {
	t.Helper()
	tr, err := New(append([]Option{WithTLS("tcp")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// The conformance suite on real UCX workers in one process. Kill closes
// the worker at once, with none of the transport's teardown: its
// endpoints close and the peers' UCX fails theirs to it, as when the
// process dies.
func TestConformanceUCX(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			return newReal(t, suiteOptions(o)...)
		},
		Kill: func(tr ext.Transport) { tr.(*Transport).closeWorker() },
	})
}
