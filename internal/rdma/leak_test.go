package rdma_test

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
)

// errorSignal is a slog handler that signals the first error record whose
// message contains want.
type errorSignal struct {
	want string
	got  chan struct{}
}

func (h *errorSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *errorSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError && strings.Contains(r.Message, h.want) {
		select {
		case h.got <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *errorSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *errorSignal) WithGroup(string) slog.Handler      { return h }

// A registry dropped without Shutdown says, at error, that its
// registrations leak (and leaves them mapped: the backend still holds
// one). One dropped after Shutdown says nothing.
func TestDroppedRegistryLogsLeak(t *testing.T) {
	h := &errorSignal{want: "without Shutdown", got: make(chan struct{}, 1)}
	b := rdmatest.New()
	func() {
		cfg := small()
		cfg.Log = slog.New(h)
		r := rdma.NewRegistry(b, cfg, nil)
		s, _ := r.StagePinned([]byte("leaked"))
		_ = s
	}()
	deadline := time.After(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-h.got:
			if b.LiveMappings() != 1 {
				t.Fatal("the leaked arena was unmapped")
			}
			return
		case <-time.After(10 * time.Millisecond): // the cleanup runs after a GC, on its own goroutine
		case <-deadline:
			t.Fatal("no leak reported for a registry dropped without Shutdown")
		}
	}
}
