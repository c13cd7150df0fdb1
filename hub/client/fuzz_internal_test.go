package client

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/velo-go/velo/ext"
)

// FuzzWatchStream feeds any bytes to the service watch's SSE reader: it
// never panics, reports only the three change kinds, and ends with one
// ServiceDisconnected when the stream ends.
func FuzzWatchStream(f *testing.F) {
	f.Add("event: initial\ndata: {\"type\":\"initial\",\"name\":\"a\",\"instances\":[]}\n\n")
	f.Add("data: {\"type\":\"added\",\"name\":\"a\",\"instances\":[\"0d8f4b3c-6f1e-4a59-9a2b-3c4d5e6f7a8b\"]}\n\n: keep-alive\n\n")
	f.Add("data: {\"type\":\"removed\",\"instances\":[\"x\"]}\ndata:\ndata: {}\n")
	f.Add("data:" + strings.Repeat("[", 5000) + "\n")
	f.Fuzz(func(t *testing.T, body string) {
		resp := &http.Response{Body: io.NopCloser(strings.NewReader(body))}
		ch := make(chan ext.ServiceEvent, 4)
		go follow(context.Background(), resp, ch)
		var last ext.ServiceEventKind
		n := 0
		for ev := range ch {
			n++
			if last == ext.ServiceDisconnected {
				t.Fatal("an event after ServiceDisconnected")
			}
			last = ev.Kind
			if ev.Kind < ext.ServiceInitial || ev.Kind > ext.ServiceDisconnected {
				t.Fatalf("kind %d", ev.Kind)
			}
		}
		if n == 0 || last != ext.ServiceDisconnected {
			t.Fatalf("stream end not reported (%d events, last %d)", n, last)
		}
	})
}
