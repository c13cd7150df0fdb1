package messenger

import (
	"crypto/tls"
	"testing"
	"unsafe"

	"github.com/velo-go/velo/ext"
)

// TestPeerTLSIsKeptPerConnection: a handler's Context finds the TLS state
// of the connection its request came on, nil for another or none, and
// nothing is kept once the connection closes. Context keeps its size.
func TestPeerTLSIsKeptPerConnection(t *testing.T) {
	var m Messenger
	st := &tls.ConnectionState{Version: tls.VersionTLS13}
	m.onConnTLS(7, st)
	if got := (&Context{m: &m, conn: 7}).PeerTLS(); got != st {
		t.Fatalf("PeerTLS on the TLS connection: %v, want its state", got)
	}
	for _, conn := range []ext.ConnID{0, 8} {
		if got := (&Context{m: &m, conn: conn}).PeerTLS(); got != nil {
			t.Fatalf("PeerTLS on connection %d: %v, want nil", conn, got)
		}
	}
	m.onConnClosed(7)
	if got := (&Context{m: &m, conn: 7}).PeerTLS(); got != nil {
		t.Fatalf("PeerTLS after the connection closed: %v, want nil", got)
	}
	n := 0
	m.tlsConns.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d TLS states kept after their connections closed", n)
	}
	if s := unsafe.Sizeof(Context{}); s != 144 {
		t.Fatalf("Context is %d bytes, want 144 (a size class)", s)
	}
}
