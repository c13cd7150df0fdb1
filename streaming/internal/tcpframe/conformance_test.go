package tcpframe

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testcert"
	"github.com/velo-go/velo/internal/testnet"
	"github.com/velo-go/velo/transport/frametransporttest"
	"github.com/velo-go/velo/transport/tcp"
)

// rawDial opens a plain TCP connection to entry's listener and writes
// route's preamble: what follows is the test's bytes.
func rawDial(_ context.Context, entry []byte, route ext.StreamRoute) (io.WriteCloser, error) {
	addr, err := tcp.DialAddr(entry)
	if err != nil {
		return nil, err
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	var pre [16]byte
	binary.BigEndian.PutUint64(pre[:], route.AnchorID)
	binary.BigEndian.PutUint64(pre[8:], route.SessionID)
	if _, err := c.Write(pre[:]); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Inputs that are no frame after the preamble.
var malformed = [][]byte{
	{0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'x'},        // schema version 2
	{0, 1, 9, 0, 0, 0, 0, 0, 0, 0, 1, 'x'},        // no such frame type
	{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 'h', 'x'},   // a Message with a header
	{0, 1, 0, 0, 0, 0, 0, 0, 0x10, 0, 0},          // a 1 MiB payload announced, nothing behind it
	{0, 1, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff}, // 2 GiB announced: over the limit
	{0, 1, 0}, // a preamble cut short
}

// killable builds transports over sockets of their own, which Kill
// resets: the transport's process died.
type killable struct {
	mu    sync.Mutex
	socks map[ext.FrameTransport]*testnet.Sockets
}

func (k *killable) new(cfg *tls.Config) ext.FrameTransport {
	s := new(testnet.Sockets)
	ft := New(s, cfg)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.socks == nil {
		k.socks = map[ext.FrameTransport]*testnet.Sockets{}
	}
	k.socks[ft] = s
	return ft
}

func (k *killable) kill(ft ext.FrameTransport) {
	k.mu.Lock()
	s := k.socks[ft]
	k.mu.Unlock()
	s.Kill()
}

func TestConformanceTCP(t *testing.T) {
	var k killable
	frametransporttest.Run(t, frametransporttest.Factory{
		New:       func(testing.TB) ext.FrameTransport { return k.new(nil) },
		DialRaw:   rawDial,
		Malformed: malformed,
		Kill:      k.kill,
	})
}

func TestConformanceTLS(t *testing.T) {
	ca := testcert.NewCA("frames")
	cfg := testcert.Mutual(ca, ca.Issue("node", "127.0.0.1"))
	var k killable
	frametransporttest.Run(t, frametransporttest.Factory{
		New:  func(testing.TB) ext.FrameTransport { return k.new(cfg) },
		Kill: k.kill,
	})
}

func TestKeys(t *testing.T) {
	if k := New(nil, nil).Key(); k != "tcp-stream" {
		t.Fatalf("TCP key %q", k)
	}
	if k := New(nil, testcert.Mutual(testcert.NewCA("k"), testcert.NewCA("k").Issue("n"))).Key(); k != "tls-stream" {
		t.Fatalf("TLS key %q", k)
	}
}
