package messenger

import (
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
)

// BenchmarkPooledRequestFrame builds and releases the frame of a small
// fire-and-forget request with a deadline, as a sender does per message.
func BenchmarkPooledRequestFrame(b *testing.B) {
	p := &peer{retains: true}
	dl := time.Now().Add(time.Minute)
	payload := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		f := pooledRequestFrame(p, FireAndForget, ResponseID{Lo: 1}, "sink", nil, payload, dl)
		f.Release()
	}
}

// BenchmarkPeerGet looks up one of two registered peers, as a sender's
// route does per message.
func BenchmarkPeerGet(b *testing.B) {
	tab := newPeerTable()
	var id ext.InstanceID
	for range 2 {
		p := &peer{info: ext.PeerInfo{InstanceID: ext.NewInstanceID()}}
		tab.put(p)
		id = p.info.InstanceID
	}
	for b.Loop() {
		if _, ok := tab.get(id); !ok {
			b.Fatal("not found")
		}
	}
}

// BenchmarkPooledRequestFrameNoDeadline is BenchmarkPooledRequestFrame
// for a caller whose context has no deadline.
func BenchmarkPooledRequestFrameNoDeadline(b *testing.B) {
	p := &peer{retains: true}
	payload := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		f := pooledRequestFrame(p, FireAndForget, ResponseID{Lo: 1}, "sink", nil, payload, time.Time{})
		f.Release()
	}
}

// BenchmarkPooledCallFrame is BenchmarkPooledRequestFrame for Unary calls
// in flight under one context: each request names its own response slot.
func BenchmarkPooledCallFrame(b *testing.B) {
	p := &peer{retains: true}
	dl := time.Now().Add(time.Minute)
	payload := make([]byte, 64)
	b.ReportAllocs()
	var i uint64
	for b.Loop() {
		i++
		f := pooledRequestFrame(p, msgwire.UnaryResponse, ResponseID{Lo: 1, Hi: i<<16 | i%64}, "echo", nil, payload, dl)
		f.Release()
	}
}
