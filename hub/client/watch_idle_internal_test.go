package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// TestSilentWatchEnds: a watch stream that sends its first event and then
// nothing, not even a keep-alive, while its connection stays open (a hub
// cut off by a partition), ends with ServiceDisconnected after watchIdle,
// so velo's resolver watches again instead of trusting it for ever.
func TestSilentWatchEnds(t *testing.T) {
	old := watchIdle
	watchIdle = 50 * time.Millisecond
	defer func() { watchIdle = old }()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", protocol.WatchContentType)
		fmt.Fprintf(w, "event: initial\ndata: {\"type\":\"initial\",\"name\":\"s\",\"instances\":[]}\n\n")
		w.(http.Flusher).Flush()
		select { // silent, connection open
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := New(Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch, err := c.Services().WatchService(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Kind != ext.ServiceInitial {
		t.Fatalf("first event %v", ev.Kind)
	}
	select {
	case ev := <-ch:
		if ev.Kind != ext.ServiceDisconnected {
			t.Fatalf("after the silence: %v, want ServiceDisconnected", ev.Kind)
		}
	case <-ctx.Done():
		t.Fatal("a silent watch stream was trusted for 20 s")
	}
}
