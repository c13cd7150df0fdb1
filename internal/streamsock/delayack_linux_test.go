package streamsock

import (
	"net"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/ext"
)

// A reader acknowledges small frames on an accepted TCP connection at most
// every second one (delayack.go), not one segment per frame: frames are
// sent one at a time, each read before the next goes, and the accepted
// socket's count of segments sent (it sends no data, so these are its
// acknowledgements) stays well under one per frame. With Linux's default
// quick acknowledgements it is one per frame.
func TestSmallFramesShareAcks(t *testing.T) {
	tx, rx := pair(t)
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	f := ext.Frame{Type: ext.Message, Header: make([]byte, 32), Payload: make([]byte, 64)}
	sent := int64(0)
	send := func() {
		if _, err := tx.t.Send(rx.id, f); err != nil {
			t.Fatal(err)
		}
		sent++
		waitCount(t, &got, sent)
	}
	send() // dial and accept
	before := segsOut(t, rx)
	const frames = 400
	for i := 0; i < frames; i++ {
		send()
	}
	acks := segsOut(t, rx) - before
	t.Logf("%d frames, %d acknowledgements", frames, acks)
	if acks > frames*3/4 {
		t.Fatalf("%d frames read one at a time took %d acknowledgements; want at most %d (every second frame)", frames, acks, frames*3/4)
	}
}

// segsOut is the segments sent by rx's one accepted connection.
func segsOut(t *testing.T, rx *testNode) int {
	t.Helper()
	var conns []net.Conn
	rx.t.accepted.Range(func(k, _ any) bool {
		conns = append(conns, k.(net.Conn))
		return true
	})
	if len(conns) != 1 {
		t.Fatalf("%d accepted connections, want 1", len(conns))
	}
	rc, err := conns[0].(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) { info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return int(info.Segs_out)
}
