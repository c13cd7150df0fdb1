package streamsock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"time"

	"github.com/velo-go/velo/ext"
)

// TLS on stream sockets.
//
// A Network that speaks TLS returns *tls.Conn from its listener, not yet
// handshaken, and from Dial, handshaken. The accept side runs the
// handshake here, on the connection's own goroutine, so a client that
// connects and never finishes holds only its connection, for at most the
// frame timeout: the accept loop never waits on a handshake.
//
// A *tls.Conn is not a syscall.Conn, so a lane on one never takes the
// inline raw-fd write path (inline.go), which would write plaintext past
// the TLS record layer; TestTLSConnIsNotASyscallConn holds that.

// handshake runs the TLS handshake of an accepted connection, bounded by
// the frame timeout and by the transport's shutdown. It returns the
// connection's state, nil for a connection that is not TLS, and false when
// the handshake failed: the connection is then closed, and nothing of it
// reaches the node.
func (t *Transport) handshake(conn net.Conn) (*tls.ConnectionState, bool) {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return nil, true
	}
	ctx, cancel := context.WithTimeout(t.life, t.cfg.FrameTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		t.handshakeFails.Add(1)
		t.log.Debug("refused an inbound connection at the TLS handshake", "remote", fmt.Sprint(conn.RemoteAddr()), "err", err)
		lingerClose(tc.NetConn())
		return nil, false
	}
	st := tc.ConnectionState()
	return &st, true
}

// ClientHandshake runs the client side of a TLS handshake with cfg on conn,
// dialed to addr, bounded by ctx and timeout (when positive). An empty
// ServerName becomes addr's host, as tls.Dial does, so a certificate for
// an IP address needs that IP in its SANs. On failure conn is closed, and
// a failure of trust matches ext.ErrPeerUntrusted (MarkUntrusted). The
// TCP messenger transport and the per-stream path both dial this way.
func ClientHandshake(ctx context.Context, conn net.Conn, cfg *tls.Config, addr string, timeout time.Duration) (*tls.Conn, error) {
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, MarkUntrusted(fmt.Errorf("tls handshake with %s: %w", addr, err))
	}
	return tc, nil
}

// lingerClose closes the socket of a failed handshake so that the alert
// the handshake wrote reaches the dialer: it half-closes, discards what
// still comes for a moment, then closes. Closing at once with the dialer's
// bytes unread would reset the connection, and a reset can destroy the
// alert, leaving the dialer with a bare "connection reset" instead of the
// reason (a certificate refused). The wait is goodbyeWait at most.
func lingerClose(raw net.Conn) {
	defer raw.Close()
	cw, ok := raw.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	raw.SetReadDeadline(time.Now().Add(goodbyeWait))
	io.CopyN(io.Discard, raw, 1<<20)
}

// closeConn closes a connection at once. A TLS connection's own Close
// first sends a close_notify alert, and that write waits up to 5 s on a
// peer that stopped reading: closing the socket under it keeps an abort
// as quick as on plain TCP. An orderly end says goodbye first (byeOne),
// and the dialer needs no close_notify to read the end of a stream: an
// end at a record boundary reads as io.EOF.
func closeConn(conn net.Conn) error {
	if tc, ok := conn.(*tls.Conn); ok {
		return tc.NetConn().Close()
	}
	return conn.Close()
}

// Trust failures are TLS alerts about certificates and access, whether
// this end sent them (its verification or authorizer refused the peer) or
// the peer did (it refused this end).
var trustAlerts = map[uint8]bool{
	42:  true, // bad_certificate: also what a failed VerifyConnection sends
	43:  true, // unsupported_certificate
	44:  true, // certificate_revoked
	45:  true, // certificate_expired
	46:  true, // certificate_unknown
	48:  true, // unknown_ca
	49:  true, // access_denied
	116: true, // certificate_required
}

// MarkUntrusted wraps err with ext.ErrPeerUntrusted when it is a failure
// of trust in a TLS handshake: a certificate that did not verify, on
// either end, or a peer refused by a VerifyConnection callback (which
// fails the handshake with a bad_certificate alert). Other errors come
// back as they are.
func MarkUntrusted(err error) error {
	if err == nil || errors.Is(err, ext.ErrPeerUntrusted) || !trustFailure(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ext.ErrPeerUntrusted, err)
}

func trustFailure(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		sent     tls.AlertError
		remote   *net.OpError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &hostname):
		return true
	case errors.As(err, &sent): // an alert this end sent
		return trustAlerts[uint8(sent)]
	case errors.As(err, &remote) && remote.Op == "remote error":
		// crypto/tls reports the peer's alert as a net.OpError around an
		// unexported uint8 type.
		if v := reflect.ValueOf(remote.Err); v.IsValid() && v.Kind() == reflect.Uint8 {
			return trustAlerts[uint8(v.Uint())]
		}
	}
	return false
}
