package ucx

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/internal/mpread"
	"github.com/velo-go/velo/internal/mpwrite"
)

// BlobVersion is the UCX wire version this build speaks. Version 2 starts
// every frame header with the sender's 8-byte incarnation (see wire.go);
// a version-1 node would read those bytes as its own header, so the two
// versions refuse each other at Register instead.
const BlobVersion = 2

// AMIDBase is the first of the Active Message ids velo claims on a UCX
// worker ("VE"). The id of a frame is AMIDBase plus its kind (wire.go).
const AMIDBase uint16 = 0x5645

// maxWorkerAddr bounds the packed worker address a peer's entry may carry.
// A real one is a few hundred bytes; the bound keeps a hostile entry from
// costing more than its own bytes, and the entry as a whole is already
// bounded by ext.DecodeWorkerAddress.
const maxWorkerAddr = 16 << 10

// Errors of the address entry. A refused entry matches ErrInvalidEndpoint;
// one from another wire version also matches ErrVersionMismatch.
var (
	ErrInvalidEndpoint = errors.New("ucx: invalid endpoint")
	ErrVersionMismatch = errors.New("ucx: unsupported ucx blob version")
)

// endpoint is the decoded "ucx" entry of a WorkerAddress. It is the
// reference's UcxEndpoint (lib/velo/src/transports/ucx/address.rs), which
// rmp_serde writes as a MessagePack array of its fields in this order,
// with worker_addr as a bin.
type endpoint struct {
	v           uint8
	amIDBase    uint16
	eagerMax    uint32 // largest header plus payload the peer takes in one AM
	incarnation uint64 // random per start: a restarted peer has a new one
	workerAddr  []byte // the packed ucp worker address, for ucp_ep_create
}

// encode writes e as rmp_serde writes the reference's struct: a fixarray
// of five, integers in their shortest form, the address as a bin.
func (e endpoint) encode() []byte {
	b := make([]byte, 0, 24+len(e.workerAddr))
	b = append(b, 0x95)
	b = mpwrite.AppendUint(b, uint64(e.v))
	b = mpwrite.AppendUint(b, uint64(e.amIDBase))
	b = mpwrite.AppendUint(b, uint64(e.eagerMax))
	b = mpwrite.AppendUint(b, e.incarnation)
	b = mpwrite.AppendBinHeader(b, len(e.workerAddr))
	return append(b, e.workerAddr...)
}

// decodeEndpoint reads an entry and checks it is one this build can talk
// to: version 2, velo's AM id base, a non-empty worker address, nothing
// after it. The version is checked as soon as it is read, so an entry of
// another version is refused as such even when its other fields differ.
// The worker address is copied: b may be reused by the caller.
func decodeEndpoint(b []byte) (endpoint, error) {
	var e endpoint
	r := mpread.New(b, ErrInvalidEndpoint)
	n, err := r.ArrayLen()
	if err != nil {
		return e, err
	}
	if n != 5 {
		return e, r.Errorf("an array of %d fields, want 5", n)
	}
	v, err := r.Uint()
	if err != nil {
		return e, err
	}
	if v != BlobVersion {
		return e, fmt.Errorf("%w: %w %d (expected %d): all UCX peers must run the same wire version",
			ErrInvalidEndpoint, ErrVersionMismatch, v, BlobVersion)
	}
	base, err := r.Uint()
	if err != nil {
		return e, err
	}
	if base != uint64(AMIDBase) {
		return e, r.Errorf("peer uses AM id base %#x, this build uses %#x", base, AMIDBase)
	}
	eager, err := r.Uint()
	if err != nil {
		return e, err
	}
	if eager > 1<<32-1 {
		return e, r.Errorf("eager_max %d does not fit a u32", eager)
	}
	inc, err := r.Uint()
	if err != nil {
		return e, err
	}
	addr, err := r.Bin()
	if err != nil {
		return e, err
	}
	switch {
	case len(addr) == 0:
		return e, r.Errorf("empty ucp worker address")
	case len(addr) > maxWorkerAddr:
		return e, r.Errorf("a worker address of %d bytes (max %d)", len(addr), maxWorkerAddr)
	case r.Len() != 0:
		return e, r.Errorf("%d trailing bytes", r.Len())
	}
	e = endpoint{v: uint8(v), amIDBase: uint16(base), eagerMax: uint32(eager), incarnation: inc,
		workerAddr: append([]byte(nil), addr...)}
	return e, nil
}
