package messenger

import (
	"crypto/tls"

	"github.com/velo-go/velo/ext"
)

// The TLS state of inbound connections.
//
// A transport that speaks TLS hands the state of each accepted connection
// over once, after its handshake and before its first frame
// (ext.TransportAdapter.ConnTLS), and the node keeps it by the
// connection's id until the connection closes. A handler's Context finds
// it by the id of the connection its request came on, so nothing is
// copied per request and a node without TLS keeps an empty map it never
// reads on a request's path.

// onConnTLS keeps the TLS state of an inbound connection.
func (m *Messenger) onConnTLS(id ext.ConnID, state *tls.ConnectionState) {
	m.tlsConns.Store(id, state)
}

// forgetConnTLS drops what onConnTLS kept for a connection that ended.
func (m *Messenger) forgetConnTLS(id ext.ConnID) {
	m.tlsConns.Delete(id)
}

// PeerTLS is the TLS state of the connection the request came on: the
// caller's verified certificate chain (PeerCertificates[0] is its own
// certificate, VerifiedChains what it was checked against), the version
// and cipher suite. It is nil when the connection is not TLS (a plain TCP
// or UDS transport, or a call from this node to itself), and once that
// connection has closed. Read it; do not change it.
func (c *Context) PeerTLS() *tls.ConnectionState {
	if c.conn == 0 {
		return nil
	}
	if s, ok := c.m.tlsConns.Load(c.conn); ok {
		return s.(*tls.ConnectionState)
	}
	return nil
}
