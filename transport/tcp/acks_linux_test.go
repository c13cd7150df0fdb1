package tcp

import (
	"io"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// quickAck reads TCP_QUICKACK back: Linux answers 0 while the socket is in
// delayed-ACK mode.
func quickAck(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}

func tcpPair(t *testing.T) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialed.Close(); accepted.Close() })
	return dialed, accepted
}

// TestAckTunerFollowsTheTraffic: small reads put the accepted socket in
// delayed-ACK mode, a bulk read takes it out again.
func TestAckTunerFollowsTheTraffic(t *testing.T) {
	dialed, accepted := tcpPair(t)
	r := (&network{}).Inbound(accepted)
	if _, ok := r.(*ackTuner); !ok {
		t.Fatalf("Inbound returned %T, want the ACK tuner", r)
	}
	if quickAck(t, accepted) != 1 {
		t.Fatal("a fresh socket is already in delayed-ACK mode")
	}
	small := make([]byte, 100)
	if _, err := dialed.Write(small); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, small); err != nil {
		t.Fatal(err)
	}
	if quickAck(t, accepted) != 0 {
		t.Fatal("a small read did not turn delayed ACKs on")
	}

	bulk := make([]byte, 1<<20)
	go dialed.Write(bulk)
	buf := make([]byte, 256<<10)
	for got := 0; got < len(bulk); {
		n, err := r.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
		if n >= largeRead {
			break
		}
	}
	if quickAck(t, accepted) != 1 {
		t.Fatal("a bulk read left delayed ACKs on")
	}
}

func TestQuickAcksOptionTurnsTuningOff(t *testing.T) {
	_, accepted := tcpPair(t)
	o := options{}
	WithQuickAcks()(&o)
	if r := (&network{o: o}).Inbound(accepted); r != io.Reader(accepted) {
		t.Fatalf("with WithQuickAcks, Inbound returned %T, want the connection itself", r)
	}
}
