package muxwire

import (
	"errors"
	"strconv"
)

// ErrMalformed matches every refusal of Decode and DecodeHeader.
var ErrMalformed = errors.New("velo: malformed mux batch")

// The specific refusals. A *DecodeError matches ErrMalformed and exactly one
// of these, so ingress can count each kind apart.
var (
	// ErrTruncated: the batch header, a record header or a record body runs
	// past the end of the payload.
	ErrTruncated = errors.New("truncated")
	// ErrVersion: mux_version is not Version.
	ErrVersion = errors.New("unsupported mux version")
	// ErrReservedFlags: a bit of the high nibble of flags is set.
	ErrReservedFlags = errors.New("reserved flag bits set")
	// ErrCountMismatch: the payload ends on a record boundary before
	// record_count records.
	ErrCountMismatch = errors.New("record count disagrees with the bytes")
	// ErrTrailingBytes: bytes remain after record_count records.
	ErrTrailingBytes = errors.New("trailing bytes")
	// ErrUnknownType: a record_type outside 0..5.
	ErrUnknownType = errors.New("unknown record type")
	// ErrBodyLength: a control record whose body is not its fixed size.
	ErrBodyLength = errors.New("wrong body length")
	// ErrUnknownReason: a CloseSlot reason outside 0..3.
	ErrUnknownReason = errors.New("unknown close reason")
	// ErrUnknownAction: a LifecycleSlot action other than 0 (stop) or 1 (cancel).
	ErrUnknownAction = errors.New("unknown lifecycle action")
)

// DecodeError says what was refused and where.
type DecodeError struct {
	// Kind is one of the specific sentinels above.
	Kind error
	// Offset is where the problem was found: the start of the record header
	// for record problems, 0 for the batch header.
	Offset int
	// Detail says what the bytes held, in words.
	Detail string
}

func (e *DecodeError) Error() string {
	return ErrMalformed.Error() + ": " + e.Kind.Error() + " at offset " + strconv.Itoa(e.Offset) + ": " + e.Detail
}

// Unwrap lets errors.Is match both ErrMalformed and the Kind.
func (e *DecodeError) Unwrap() []error { return []error{ErrMalformed, e.Kind} }

func refuse(kind error, offset int, detail string) *DecodeError {
	return &DecodeError{Kind: kind, Offset: offset, Detail: detail}
}

// Encoder errors. The encoder refuses to write what Decode would refuse, and
// leaves the batch as it was.
var (
	// ErrNotStarted: a record was added before Start.
	ErrNotStarted = errors.New("velo: mux batch not started")
	// ErrBatchFull: the batch already holds MaxRecords records.
	ErrBatchFull = errors.New("velo: mux batch holds the most records a u16 count allows")
	// ErrBodyTooLarge: a Data body longer than a u32 can state.
	ErrBodyTooLarge = errors.New("velo: mux record body longer than a u32 length")
	// ErrBadLane: a lane outside 0..15.
	ErrBadLane = errors.New("velo: mux lane outside 0..15")
	// ErrBadReason: a CloseReason that Decode would refuse.
	ErrBadReason = errors.New("velo: unknown mux close reason")
	// ErrBadAction: a LifecycleAction that Decode would refuse.
	ErrBadAction = errors.New("velo: unknown mux lifecycle action")
)

func itoa(n int) string { return strconv.Itoa(n) }
