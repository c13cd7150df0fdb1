package transporttest

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// scribbleOwner is the Owner of one outbound frame's payload, as a pooled
// batch buffer is: the sender holds one reference and drops it as soon as
// Send returns. At the last Release the buffer is "reused" at once (it is
// overwritten), so a transport that writes the payload after releasing
// its owner sends garbage, and the receiver sees it.
type scribbleOwner struct {
	t        testing.TB
	buf      []byte
	mu       sync.Mutex
	refs     int
	released chan struct{}
}

func newScribbleOwner(t testing.TB, buf []byte) *scribbleOwner {
	return &scribbleOwner{t: t, buf: buf, refs: 1, released: make(chan struct{})}
}

func (o *scribbleOwner) Retain() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refs <= 0 {
		o.t.Errorf("Retain after the last Release: the sender may have reused the buffer already")
	}
	o.refs++
}

func (o *scribbleOwner) Release() {
	o.mu.Lock()
	o.refs--
	n := o.refs
	o.mu.Unlock()
	switch {
	case n == 0:
		for i := range o.buf {
			o.buf[i] = 0xEE
		}
		close(o.released)
	case n < 0:
		o.t.Errorf("an owner was released more often than it was retained")
	}
}

// testOwnersRetained holds a transport that says it retains owners
// (ext.OwnerRetainer) to that: a frame's bytes go out intact though the
// sender drops its reference as Send returns, whatever path the frame
// takes (queued before the connection is up, coalesced small frames,
// large payloads written later), and every owner is released once done.
func testOwnersRetained(t *testing.T, f Factory) {
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{}, 0)
	if r, ok := tx.tr.(ext.OwnerRetainer); !ok || !r.RetainsOwners() {
		t.Skip("the transport does not retain owners: senders hand it copies")
	}
	tx.register(t, rx)
	sizes := []int{64, 100 << 10, 4 << 20}
	const frames = 30
	var want [][]byte
	var owners []*scribbleOwner
	for i := range frames {
		p := bytes.Repeat([]byte{byte(i + 1)}, sizes[i%len(sizes)])
		want = append(want, bytes.Clone(p))
		o := newScribbleOwner(t, p)
		fr := seqFrame(0, i, p)
		fr.Owner = o
		mustSend(t, tx.tr, rx.id, 0, fr)
		o.Release() // the sender's reference: its buffer is reused now unless the transport holds it
		owners = append(owners, o)
	}
	for i, fr := range collect(t, rx, frames) {
		if _, s := parseSeq(fr); s != i || !bytes.Equal(fr.Payload, want[i]) {
			t.Fatalf("frame %d (seq %d, %d bytes) arrived changed: its bytes were used after its owner was released", i, s, len(fr.Payload))
		}
	}
	for i, o := range owners {
		select {
		case <-o.released:
		case <-time.After(waitLimit):
			t.Fatalf("the owner of frame %d was never released", i)
		}
	}
}
