package messenger_test

import (
	"sync"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// A fire-and-forget message that the transport took and then could not
// deliver (here: every dial is refused) is counted for its peer and
// reported to the node's undelivered handler with its handler name: Send
// itself returned nil, so this is the only way the sender can know.
func TestUndeliveredMessagesAreCountedAndReported(t *testing.T) {
	type report struct {
		peer    ext.InstanceID
		handler string
		err     error
	}
	var mu sync.Mutex
	var reports []report
	sender := newNode(t, velo.WithUndeliveredHandler(func(peer ext.InstanceID, handler string, err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, report{peer, handler, err})
	}))
	// Port 1 on loopback: nothing listens there, and unlike a port just
	// closed, no other test's listener can take it meanwhile.
	const closed = "127.0.0.1:1"
	gone := ext.NewInstanceID()
	info := ext.PeerInfo{InstanceID: gone, Address: ext.WorkerAddress{tcp.Key: []byte(closed)}}
	must(t, sender.RegisterPeer(info))
	// A system handler skips the handshake, so Send only queues. Once the
	// refused dial has ended the connection, a later Send may fail at once
	// instead (it returns the error itself): only the admitted ones count.
	// On a loaded machine the dial can fail before the first Send; the
	// peer is then registered again, which starts a fresh connection.
	var admitted int64
	for try := 0; admitted < 3 && try < 10000; try++ {
		if err := sender.Send(testCtx(t), gone, "_notify", []byte("x")); err == nil {
			admitted++
		} else if admitted == 0 && try%100 == 99 {
			sender.UnregisterPeer(gone)
			must(t, sender.RegisterPeer(info))
		}
	}
	if admitted == 0 {
		t.Fatal("no Send was admitted in 10,000 tries")
	}
	waitFor(t, "every admitted message to be reported undelivered", func() bool { return sender.Undelivered(gone) == admitted })
	mu.Lock()
	defer mu.Unlock()
	if int64(len(reports)) != admitted {
		t.Fatalf("%d reports, want %d", len(reports), admitted)
	}
	for _, r := range reports {
		if r.peer != gone || r.handler != "_notify" || r.err == nil {
			t.Fatalf("report %+v, want peer %s, handler _notify and an error", r, gone)
		}
	}
}
