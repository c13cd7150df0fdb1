//go:build ucx

package ucx

import (
	"context"
	"errors"
	"testing"

	ucxtls "github.com/velo-go/velo/internal/ucx"

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

// peerErrors reports whether the UCX transports in use detect a lost peer:
// UCX 1.13's shared-memory ones (UCX_TLS=sm,self) do not, and endpoints
// over them are made without peer error handling.
func peerErrors() bool { return !ucxtls.EnvSharedMemoryOnly() }

// The conformance suite on real UCX workers in one process. Kill closes
// the worker at once, with none of the transport's teardown: its
// endpoints close and the peers' UCX fails theirs to it, as when the
// process dies.
func TestConformanceUCX(t *testing.T) {
	transporttest.Run(t, transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			return newReal(t, suiteOptions(o)...)
		},
		Kill: kill,
	})
}

// kill closes a transport's worker at once, or is nil when no peer loss
// can be detected (peerErrors).
var kill = func() func(ext.Transport) {
	if !peerErrors() {
		return nil
	}
	return func(tr ext.Transport) { tr.(*Transport).closeWorker() }
}()

// A header that UCX's AM header limit cannot take is refused at Send, as
// too large, before anything reaches the wire; one that fits goes.
func TestHeaderOverAMLimitRefused(t *testing.T) {
	a := startNode(t, newReal(t))
	b := startNode(t, newReal(t))
	a.register(t, b)
	if a.tr.maxHeader <= incLen {
		t.Fatalf("the worker reports an AM header limit of %d", a.tr.maxHeader)
	}
	big := ext.Frame{Type: ext.Event, Header: make([]byte, a.tr.maxHeader-incLen+1)}
	if _, err := a.tr.Send(b.id, big); !errors.Is(err, ext.ErrFrameTooLarge) {
		t.Fatalf("a header over the limit: %v", err)
	}
	fits := ext.Frame{Type: ext.Event, Header: make([]byte, a.tr.maxHeader-incLen)}
	if _, err := a.tr.Send(b.id, fits); err != nil {
		t.Fatal(err)
	}
	f, err := b.adapter.Events().Pop(context.Background())
	if err != nil || len(f.Header) != len(fits.Header) {
		t.Fatalf("the largest header: %d bytes, %v", len(f.Header), err)
	}
}
