package quic

import (
	"context"
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/velo-go/velo/ext"
)

// Kill stops a QUIC transport as the conformance suite's crash: every
// connection closes at once, and says so to its peer (CONNECTION_CLOSE).
func Kill(tr ext.Transport) { tr.(*Transport).stop(true) }

// Vanish stops a transport as a real crash does: its sockets close without
// a word to any peer, so peers find out only by their idle timeout.
func Vanish(tr ext.Transport) {
	t := tr.(*Transport)
	t.n.mu.Lock()
	trs := append(append([]*quic.Transport(nil), t.n.servers...), t.n.clients...)
	t.n.mu.Unlock()
	for _, q := range trs {
		if q != nil {
			q.Close() // no CONNECTION_CLOSE
		}
	}
	t.stop(true)
}

// DialRaw opens a bare stream to a started transport's entry, pinning its
// certificate as a dialer does, for feeding it bad bytes. The connection
// has its own socket, closed with it.
func DialRaw(ep []byte) (net.Conn, error) {
	id, err := newIdentity()
	if err != nil {
		return nil, err
	}
	o := &options{connectTimeout: 5 * time.Second, idleTimeout: DefaultIdleTimeout, keepAlive: DefaultKeepAlive}
	n := newNetwork(o, id)
	n.abrupt.Store(true) // Close closes the connection at once
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := n.DialLane(ctx, ep, 0)
	if err != nil {
		n.closeAll(0)
		return nil, err
	}
	return &rawConn{Conn: c, n: n}, nil
}

type rawConn struct {
	net.Conn
	n *network
}

func (c *rawConn) Close() error {
	c.Conn.Close()
	c.n.closeAll(0)
	return nil
}
