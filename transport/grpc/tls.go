package grpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"google.golang.org/grpc/credentials"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamsock"
)

// TLS for both gRPC transports: grpc-go's own TLS credentials
// (credentials.NewTLS, which adds the "h2" ALPN protocol), with the rules
// the TCP transport's WithTLS has: one config for both ends, TLS 1.3 unless
// the config asks for 1.2, mutual TLS when ClientAuth asks for client
// certificates, and a dial refused on trust matching ext.ErrPeerUntrusted.

// WithTLS runs the transport's server and every connection it dials over
// TLS with cfg, one config for both ends. The server serves with it:
// Certificates (or GetCertificate) is this node's certificate, and
// ClientAuth with ClientCAs asks for mutual TLS
// (tls.RequireAndVerifyClientCert refuses a dialer without a certificate
// those CAs signed, in the handshake: no stream of it reaches the node).
// The dialer dials with a copy of it: RootCAs verifies the peer's
// certificate, Certificates is this node's client certificate, and an
// empty ServerName becomes the host of the address dialed (so a
// certificate for an IP address needs that IP in its SANs).
//
// MinVersion must be TLS 1.2 or later; left at zero it is TLS 1.3 (1.2
// when MaxVersion is 1.2). The address key stays "grpc": a peer that dials
// it in the clear fails to connect. A connection refused on trust (the
// peer's certificate did not verify) fails the peer's streams and health
// check with an error that matches ext.ErrPeerUntrusted. A node built
// with this transport runs its per-stream TCP path over the same TLS
// (velo.New reads TLSConfig). The config is cloned.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithFrameTLS runs the gRPC frame transport over TLS with cfg, with the
// rules of WithTLS: the listener serves with cfg, each stream dials with a
// copy of it, and a dial refused on trust matches ext.ErrPeerUntrusted.
// The key stays "grpc-stream".
func WithFrameTLS(cfg *tls.Config) FrameOption { return func(o *frameOptions) { o.tls = cfg } }

// checkTLS clones cfg and sets its version floor, or refuses it.
func checkTLS(cfg *tls.Config) (*tls.Config, error) {
	if cfg == nil {
		return nil, nil
	}
	c := cfg.Clone()
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS13
		if c.MaxVersion != 0 && c.MaxVersion < tls.VersionTLS13 {
			c.MinVersion = tls.VersionTLS12
		}
	}
	if c.MinVersion < tls.VersionTLS12 {
		return nil, fmt.Errorf("grpc: TLS MinVersion %#x is below TLS 1.2", c.MinVersion)
	}
	if len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil {
		return nil, errors.New("grpc: the TLS config has no certificate to serve (Certificates or GetCertificate)")
	}
	return c, nil
}

// clientCreds are the credentials of one client connection: TLS with cfg,
// or none, keeping the last handshake's failure of trust so that the
// error of a connection that never came up can say why.
type clientCreds struct {
	credentials.TransportCredentials
	untrusted *atomic.Pointer[error] // shared by clones
}

func newClientCreds(cfg *tls.Config) *clientCreds {
	c := &clientCreds{untrusted: new(atomic.Pointer[error])}
	if cfg == nil {
		c.TransportCredentials = insecureCreds()
	} else {
		c.TransportCredentials = credentials.NewTLS(cfg)
	}
	return c
}

// ClientHandshake marks a failure of trust (streamsock.MarkUntrusted) and
// keeps it; a handshake that succeeds forgets it.
func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	nc, ai, err := c.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if err != nil {
		err = streamsock.MarkUntrusted(err)
		if errors.Is(err, ext.ErrPeerUntrusted) {
			c.untrusted.Store(&err)
		}
		return nil, nil, err
	}
	c.untrusted.Store(nil)
	return nc, ai, nil
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	return &clientCreds{TransportCredentials: c.TransportCredentials.Clone(), untrusted: c.untrusted}
}

// explain adds the last failure of trust to err, the failure of a
// connection that never came up; err is returned as it is otherwise.
func (c *clientCreds) explain(err error) error {
	if c == nil || err == nil {
		return err
	}
	if why := c.untrusted.Load(); why != nil {
		return fmt.Errorf("%w: %w", err, *why)
	}
	return err
}

// serverCreds are the server's credentials: TLS with cfg, or none.
func serverCreds(cfg *tls.Config) credentials.TransportCredentials {
	if cfg == nil {
		return insecureCreds()
	}
	return credentials.NewTLS(cfg)
}
