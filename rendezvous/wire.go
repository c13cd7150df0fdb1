package rendezvous

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

	"github.com/velo-go/velo/ext"
)

// The control plane is JSON over ordinary messenger calls. Field names and
// order follow the reference's serde types, so a Go node and a Rust node
// read each other's bodies; the golden vectors in wire_test.go pin them.
//
// Rule for growth: a new field is optional, and leaving it out means what
// the protocol did before it existed. Decoders ignore fields they do not
// know, so an older peer reads a newer body as it always did.

// Handler names the owner registers.
const (
	HandlerMetadata   = "_rv_metadata"
	HandlerAcquire    = "_rv_acquire"
	HandlerPull       = "_rv_pull"
	HandlerRef        = "_rv_ref"
	HandlerDetach     = "_rv_detach"
	HandlerRelease    = "_rv_release"
	HandlerLeaseRenew = "_rv_lease_renew"
)

// LeaseHeader on an _rv_acquire asks the owner to end the chunked lease
// when no _rv_pull (or _rv_lease_renew) renews it within that many
// milliseconds. Without it the lease has no deadline, as before it existed.
const LeaseHeader = "_rv_lease_ms"

// DataHandle names a staged payload: the owner's WorkerID in the upper 64
// bits, the owner's local slot id (never 0) in the lower 64. On the wire it
// is {"hi": ..., "lo": ...}; in the _rv header, the decimal form of the
// 128-bit number.
type DataHandle struct {
	Hi uint64 `json:"hi"`
	Lo uint64 `json:"lo"`
}

// Owner is the worker that staged the payload.
func (h DataHandle) Owner() ext.WorkerID { return ext.WorkerID(h.Hi) }

// LocalID is the owner's slot id.
func (h DataHandle) LocalID() uint64 { return h.Lo }

// String is the decimal form of the 128-bit value (the _rv header's form).
func (h DataHandle) String() string {
	v := new(big.Int).SetUint64(h.Hi)
	v.Lsh(v, 64)
	return v.Or(v, new(big.Int).SetUint64(h.Lo)).String()
}

var errBadHandle = errors.New("rendezvous: malformed handle")

// ParseHandle reads the decimal form: 1 to 39 ASCII digits whose value
// fits in 128 bits.
func ParseHandle(s string) (DataHandle, error) {
	if len(s) == 0 || len(s) > 39 {
		return DataHandle{}, errBadHandle
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return DataHandle{}, errBadHandle
		}
	}
	v, ok := new(big.Int).SetString(s, 10)
	if !ok || v.BitLen() > 128 {
		return DataHandle{}, errBadHandle
	}
	lo := new(big.Int).And(v, new(big.Int).SetUint64(^uint64(0))).Uint64()
	return DataHandle{Hi: new(big.Int).Rsh(v, 64).Uint64(), Lo: lo}, nil
}

// Metadata is the answer of _rv_metadata: what a consumer can learn about
// a staged payload without taking a lease.
type Metadata struct {
	TotalLen uint64 `json:"total_len"`
	Refcount uint32 `json:"refcount"`
	Pinned   bool   `json:"pinned"`
}

// handleRequest is the body of _rv_metadata and _rv_ref.
type handleRequest struct {
	Handle DataHandle `json:"handle"`
}

// acquireRequest is the body of _rv_acquire: the handle and, when the
// consumer can GET, its RDMA offer. No offer is written as no field at
// all, so the body of a consumer that offers nothing is the one it always
// was, and an owner that knows no offer ignores the field.
type acquireRequest struct {
	Handle DataHandle `json:"handle"`
	Rdma   *rdmaOffer `json:"rdma,omitempty"`
}

// rdmaOffer is the book's RdmaOffer: the backends the consumer can GET with.
type rdmaOffer struct {
	Backends []string `json:"backends"`
}

// leaseRequest is the body of _rv_detach, _rv_release and _rv_lease_renew.
type leaseRequest struct {
	Handle  DataHandle `json:"handle"`
	LeaseID uint64     `json:"lease_id"`
}

// pullRequest is the body of _rv_pull; the answer is the chunk's raw bytes.
type pullRequest struct {
	TransferID uint64 `json:"transfer_id"`
	ChunkIndex uint32 `json:"chunk_index"`
}

// ready is the chunked answer of _rv_acquire.
type ready struct {
	LeaseID    uint64 `json:"lease_id"`
	TransferID uint64 `json:"transfer_id"`
	TotalLen   uint64 `json:"total_len"`
	ChunkSize  uint32 `json:"chunk_size"`
	ChunkCount uint32 `json:"chunk_count"`
}

// rdmaAnswer is the RDMA answer of _rv_acquire: the lease, the binary
// descriptor of the staged bytes (see rdmapath.Descriptor) and the lease's
// deadline in milliseconds. A missing lease_timeout_ms is 0, no deadline,
// which is what an owner from before the field meant.
type rdmaAnswer struct {
	LeaseID        uint64    `json:"lease_id"`
	Descriptor     byteArray `json:"descriptor"`
	LeaseTimeoutMS uint64    `json:"lease_timeout_ms"`
}

// acquireAnswer is the externally tagged enum {"Ready": {...}} or
// {"Rdma": {...}}: the path decision for one transfer lives here.
type acquireAnswer struct {
	Ready *ready
	Rdma  *rdmaAnswer
}

func (a acquireAnswer) MarshalJSON() ([]byte, error) {
	switch {
	case a.Ready != nil:
		return json.Marshal(struct {
			Ready *ready `json:"Ready"`
		}{a.Ready})
	case a.Rdma != nil:
		return json.Marshal(struct {
			Rdma *rdmaAnswer `json:"Rdma"`
		}{a.Rdma})
	default:
		return nil, errors.New("rendezvous: an acquire answer with no variant")
	}
}

func (a *acquireAnswer) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if len(m) != 1 {
		return fmt.Errorf("rendezvous: acquire answer with %d variants", len(m))
	}
	for k, v := range m {
		switch k {
		case "Ready":
			var r ready
			if err := strictObject(v, &r); err != nil {
				return err
			}
			a.Ready = &r
		case "Rdma":
			var r rdmaAnswer
			if err := strictObject(v, &r); err != nil {
				return err
			}
			a.Rdma = &r
		default:
			return fmt.Errorf("rendezvous: unknown acquire answer %q", k)
		}
	}
	return nil
}

// strictObject decodes an object and refuses null, which json.Unmarshal
// would take as "nothing to do".
func strictObject(b []byte, v any) error {
	if len(b) == 0 || b[0] != '{' {
		return errors.New("rendezvous: expected a JSON object")
	}
	return json.Unmarshal(b, v)
}

// decode reads one body into v, refusing what is not an object.
func decode(b []byte, v any) error {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	if err := strictObject(b, v); err != nil {
		return fmt.Errorf("rendezvous: decode request: %w", err)
	}
	return nil
}
