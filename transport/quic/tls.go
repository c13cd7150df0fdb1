package quic

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/velo-go/velo/ext"
)

// ALPN is the application protocol both ends offer; a peer that speaks
// another fails the handshake. It is the reference's.
const ALPN = "velo-quic/1"

// ServerName is the name every dialer presents and every certificate
// holds. The pinned fingerprint, not the name, identifies the peer.
const ServerName = "velo"

// identity is a transport's self-signed certificate and its fingerprint.
type identity struct {
	cert        tls.Certificate
	fingerprint Fingerprint
}

// newIdentity makes a fresh self-signed ECDSA P-256 certificate for
// ServerName, as the reference's rcgen::generate_simple_self_signed does,
// valid from 1975 to 4096 like rcgen's, so no clock skew can expire it:
// trust comes from the pin, not from dates.
func newIdentity() (*identity, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("quic: certificate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 63))
	if err != nil {
		return nil, fmt.Errorf("quic: certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "velo quic transport"},
		DNSNames:     []string{ServerName},
		NotBefore:    time.Date(1975, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(4096, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("quic: self-signed certificate: %w", err)
	}
	return &identity{
		cert:        tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		fingerprint: sha256.Sum256(der),
	}, nil
}

// serverTLS is the listener's config: TLS 1.3 (QUIC requires it), the
// transport's certificate, the velo ALPN, no client certificate.
func (id *identity) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.cert},
		NextProtos:   []string{ALPN},
	}
}

// errFingerprint is what the dialer's verifier returns for a certificate
// other than the pinned one.
var errFingerprint = fmt.Errorf("%w: the listener's certificate is not the one its address pins", ext.ErrPeerUntrusted)

// pinnedTLS is a dialer's config for a peer whose certificate has the
// fingerprint want. InsecureSkipVerify turns off only the chain and name
// checks, which a self-signed certificate cannot pass; the pin replaces
// them, and crypto/tls still checks the TLS 1.3 CertificateVerify
// signature against the certificate's key, so a listener that shows the
// right certificate without its private key fails too.
func pinnedTLS(want Fingerprint) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		ServerName:         ServerName,
		NextProtos:         []string{ALPN},
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || sha256.Sum256(raw[0]) != want {
				return errFingerprint
			}
			return nil
		},
	}
}

// markDialError makes a failed dial match ext.ErrPeerUnreachable, and
// ext.ErrPeerUntrusted too when the handshake failed on trust: our pin
// refused the certificate, or the peer sent a trust alert.
func markDialError(addr string, err error) error {
	untrusted := errors.Is(err, ext.ErrPeerUntrusted)
	var te *quic.TransportError
	if !untrusted && errors.As(err, &te) && te.ErrorCode.IsCryptoError() {
		switch te.ErrorCode - 0x100 {
		case 42, 43, 44, 45, 46, 48, 49, 116: // certificate and access alerts
			untrusted = true
		}
	}
	if untrusted && !errors.Is(err, ext.ErrPeerUntrusted) {
		err = fmt.Errorf("%w: %w", ext.ErrPeerUntrusted, err)
	}
	return fmt.Errorf("%w: quic dial %s: %w", ext.ErrPeerUnreachable, addr, err)
}
