package tcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamsock"
)

// TLSKey is the address key of a TCP transport built WithTLS. It is not
// Key: a peer that speaks plain TCP (a Go node without TLS, or the Rust
// reference) looks its endpoint up under "tcp" and so never sends plain
// frames to a TLS listener, and one node can run a plain and a TLS
// transport side by side.
const TLSKey ext.TransportKey = "tls"

// TLSPriority is the default priority of a transport built WithTLS: above
// plain TCP's 100, so a peer that offers both is reached over TLS.
const TLSPriority = 110

// WithTLS runs every connection of the transport over TLS, with one config
// for both ends. The listener serves with it: Certificates (or
// GetCertificate) is this node's certificate, and ClientAuth with
// ClientCAs asks for mutual TLS (tls.RequireAndVerifyClientCert refuses a
// dialer without a certificate those CAs signed). The dialer dials with a
// copy of it: RootCAs verifies the peer's certificate, Certificates is
// this node's client certificate for mutual TLS, and an empty ServerName
// is set to the host of the address dialed, as tls.Dial does (so a
// certificate for an IP address needs that IP in its SANs).
//
// MinVersion must be TLS 1.2 or later; left at zero it is TLS 1.3 (1.2
// when MaxVersion is 1.2). The transport's address key becomes TLSKey,
// "tls", and its default priority TLSPriority. The endpoint is encoded as
// a plain TCP endpoint.
//
// A handshake is bounded by the frame timeout (WithFrameTimeout, default
// 30 s) on both ends. On an accepted connection it runs on that
// connection's goroutine, never the accept loop, and one that fails or
// times out is closed and counted (Stats.HandshakeFailures): nothing of it
// reaches the node. A dial that fails on trust (the peer's certificate did
// not verify, or a peer authorizer refused it) fails with an error that
// matches ext.ErrPeerUntrusted; calls to that peer fail with it and
// ErrPeerUnreachable. A handler reads the caller's verified certificates
// with Context.PeerTLS.
//
// The config is cloned; changing it after New has no effect.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithPeerAuthorizer lets the node refuse a peer by its verified TLS
// state, after the certificate chain was verified, on connections it
// accepts and on those it dials: fn returns an error to refuse (the
// caller's or listener's certificate is state.PeerCertificates[0]). It
// runs after the config's own VerifyConnection, when there is one. A
// refusal fails the handshake; the peer's dial then fails with
// ErrPeerUntrusted, and nothing of the connection reaches the node.
//
// On an accepted connection the client may have sent no certificate, if
// the config's ClientAuth allows that: state.PeerCertificates is then
// empty. It needs WithTLS.
func WithPeerAuthorizer(fn func(state tls.ConnectionState) error) Option {
	return func(o *options) { o.authorize = fn }
}

// refusedError is the error of a peer authorizer or a VerifyConnection
// callback: the handshake fails with it.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return ext.ErrPeerUntrusted.Error() + ": " + e.err.Error() }
func (e *refusedError) Unwrap() []error {
	return []error{ext.ErrPeerUntrusted, e.err}
}

// setupTLS derives the listener's and the dialer's configs from WithTLS.
func (n *network) setupTLS() error {
	o := &n.o
	if o.tls == nil {
		if o.authorize != nil {
			return errors.New("tcp: WithPeerAuthorizer needs WithTLS")
		}
		return nil
	}
	c := o.tls.Clone()
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS13
		if c.MaxVersion != 0 && c.MaxVersion < tls.VersionTLS13 {
			c.MinVersion = tls.VersionTLS12
		}
	}
	if c.MinVersion < tls.VersionTLS12 {
		return fmt.Errorf("tcp: WithTLS: MinVersion %#x is below TLS 1.2", c.MinVersion)
	}
	if len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil {
		return errors.New("tcp: WithTLS: the config has no certificate to serve (Certificates or GetCertificate)")
	}
	c.VerifyConnection = verifier(c.VerifyConnection, o.authorize)
	if get := c.GetConfigForClient; get != nil {
		// A config chosen per client still refuses old versions and runs
		// the authorizer.
		minVersion := c.MinVersion
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			sc, err := get(hello)
			if sc == nil || err != nil {
				return sc, err
			}
			sc = sc.Clone()
			sc.MinVersion = max(sc.MinVersion, minVersion)
			sc.VerifyConnection = verifier(sc.VerifyConnection, o.authorize)
			return sc, nil
		}
	}
	n.server, n.client = c, c
	o.cfg.Key = TLSKey
	if !o.prioritySet {
		o.cfg.Priority = TLSPriority
	}
	return nil
}

// verifier runs the config's own VerifyConnection, then the authorizer,
// and marks a refusal by either as a failure of trust.
func verifier(own, authorize func(tls.ConnectionState) error) func(tls.ConnectionState) error {
	if own == nil && authorize == nil {
		return nil
	}
	return func(cs tls.ConnectionState) error {
		if own != nil {
			if err := own(cs); err != nil {
				return &refusedError{err}
			}
		}
		if authorize != nil {
			if err := authorize(cs); err != nil {
				return &refusedError{err}
			}
		}
		return nil
	}
}

// handshake runs the client side of the TLS handshake on a dialed
// connection, bounded by the dial's context and the frame timeout.
func (n *network) handshake(ctx context.Context, conn net.Conn, addr string) (net.Conn, error) {
	timeout := n.o.cfg.FrameTimeout
	if timeout <= 0 {
		timeout = streamsock.DefaultFrameTimeout
	}
	return streamsock.ClientHandshake(ctx, conn, n.client, addr, timeout)
}

// TLSConfig is a copy of the config the transport serves and dials with
// (WithTLS, with the version floor and the peer authorizer it added), or
// nil for a plain transport. A node gives it to its per-stream listener,
// so that streams off the mux run under the same TLS as its messages.
func (t *Transport) TLSConfig() *tls.Config {
	if n, ok := t.s.Network().(*network); ok && n.client != nil {
		return n.client.Clone()
	}
	return nil
}
