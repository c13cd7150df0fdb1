package protocol

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// HubID names one run of a hub: a new id each time a hub starts. A
// registrant that sees the id change in a heartbeat knows the hub
// restarted (and registers again with its credential). Its text form is
// 32 lower-case hex digits.
type HubID [16]byte

// NewHubID draws a random HubID.
func NewHubID() HubID {
	var id HubID
	mustRead(id[:])
	return id
}

// IsZero reports whether id is the zero value (no hub).
func (id HubID) IsZero() bool { return id == HubID{} }

func (id HubID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText writes the 32 hex digits.
func (id HubID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText reads 32 hex digits.
func (id *HubID) UnmarshalText(b []byte) error {
	if len(b) != 32 {
		return fmt.Errorf("velo hub: hub id %q is not 32 hex digits", b)
	}
	var v HubID
	if _, err := hex.Decode(v[:], b); err != nil {
		return fmt.Errorf("velo hub: hub id %q is not 32 hex digits", b)
	}
	*id = v
	return nil
}

// Epoch numbers the registrations a hub accepts. Each registration gets a
// new epoch, greater than every earlier one of the same hub, so an
// extension can tell the registration it committed from a later one.
// Epochs travel as JSON numbers; the hub keeps them below 2^53 so that
// JavaScript clients read them exactly.
type Epoch uint64

// CredentialBytes is the number of random bytes in a credential.
const CredentialBytes = 32

// Credential is the secret that a registration's owner presents in
// CredentialHeader: 32 random bytes as unpadded base64url (43 characters).
// Only the hub mints credentials; it keeps only their digests.
type Credential string

// NewCredential draws a fresh credential.
func NewCredential() Credential {
	var b [CredentialBytes]byte
	mustRead(b[:])
	return Credential(base64.RawURLEncoding.EncodeToString(b[:]))
}

// Valid reports whether c has the form NewCredential writes. A hub checks
// the form before it hashes, so a forged header of any length costs one
// length check.
func (c Credential) Valid() bool {
	if len(c) != base64.RawURLEncoding.EncodedLen(CredentialBytes) {
		return false
	}
	var b [CredentialBytes]byte
	n, err := base64.RawURLEncoding.Decode(b[:], []byte(c))
	return err == nil && n == CredentialBytes
}

// Digest is the SHA-256 of the credential's text, which is what a store
// keeps.
func (c Credential) Digest() CredentialDigest { return sha256.Sum256([]byte(c)) }

// String hides the secret, so that logging a Credential by mistake leaks
// nothing.
func (c Credential) String() string { return "<credential>" }

// GoString hides the secret from %#v too.
func (c Credential) GoString() string { return "<credential>" }

// CredentialDigest is the SHA-256 digest of a Credential. A copy of a
// digest gives no authority.
type CredentialDigest [sha256.Size]byte

// Equal compares in constant time: the time does not depend on where the
// digests first differ.
func (d CredentialDigest) Equal(o CredentialDigest) bool {
	return subtle.ConstantTimeCompare(d[:], o[:]) == 1
}

// IsZero reports whether d is the zero value (no digest).
func (d CredentialDigest) IsZero() bool { return d == CredentialDigest{} }

// MarshalText writes the digest as 64 hex digits (stores that keep
// records as JSON use it).
func (d CredentialDigest) MarshalText() ([]byte, error) {
	return []byte(hex.EncodeToString(d[:])), nil
}

// UnmarshalText reads 64 hex digits.
func (d *CredentialDigest) UnmarshalText(b []byte) error {
	if len(b) != 2*sha256.Size {
		return fmt.Errorf("velo hub: credential digest is not %d hex digits", 2*sha256.Size)
	}
	var v CredentialDigest
	if _, err := hex.Decode(v[:], b); err != nil {
		return fmt.Errorf("velo hub: credential digest: %w", err)
	}
	*d = v
	return nil
}

func mustRead(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic("velo hub: crypto/rand failed: " + err.Error())
	}
}
