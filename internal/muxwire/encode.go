package muxwire

import (
	"encoding/binary"
	"math"
	"slices"
)

var be = binary.BigEndian

// BatchHeader is the 16-byte header of a batch:
//
//	[u8 mux_version][u8 flags][u16 record_count][u64 peer_epoch][u32 batch_seq]
type BatchHeader struct {
	Version uint8
	// Flags holds the lane in its low four bits; the high four are reserved
	// and zero.
	Flags uint8
	Count uint16
	// Epoch is bumped each time the sender re-establishes its view of the
	// peer; ingress drops a stale epoch's batches on the header alone.
	Epoch uint64
	// Seq advances within an epoch, compared with SeqAfter.
	Seq uint32
}

// Lane is the lane the header names.
func (h BatchHeader) Lane() int { return int(h.Flags & 0x0f) }

// AppendBatchHeader appends the 16 bytes of h, as they are, without checks.
func AppendBatchHeader(dst []byte, h BatchHeader) []byte {
	dst = append(dst, h.Version, h.Flags)
	dst = be.AppendUint16(dst, h.Count)
	dst = be.AppendUint64(dst, h.Epoch)
	return be.AppendUint32(dst, h.Seq)
}

// Encoder appends one batch to a buffer the caller owns. The zero value is
// ready for Start. It keeps the record count in the header up to date after
// every record, so Bytes is a complete batch at any moment: the batcher can
// cut wherever a clamp binds without a finishing step.
//
// With enough capacity in the buffer, no method allocates.
type Encoder struct {
	buf     []byte
	start   int // where the batch header begins in buf
	count   uint16
	started bool
}

// Start begins a batch at the end of dst (pass buf[:0] to reuse a buffer)
// and writes its header with a count of zero.
func (e *Encoder) Start(dst []byte, lane int, epoch uint64, seq uint32) error {
	if lane < 0 || lane >= Lanes {
		return ErrBadLane
	}
	e.start, e.count, e.started = len(dst), 0, true
	e.buf = AppendBatchHeader(dst, BatchHeader{Version: Version, Flags: uint8(lane), Epoch: epoch, Seq: seq})
	return nil
}

// Bytes is the buffer passed to Start with the batch appended so far.
func (e *Encoder) Bytes() []byte { return e.buf }

// Batch is the batch alone, without what came before it in the buffer.
func (e *Encoder) Batch() []byte { return e.buf[e.start:] }

// Len is the size of the batch so far, header included. The batcher compares
// it with its byte caps before it adds a record.
func (e *Encoder) Len() int { return len(e.buf) - e.start }

// Count is the number of records so far.
func (e *Encoder) Count() int { return int(e.count) }

// RecordLen is the encoded size of a record with a body of n bytes.
func RecordLen(n int) int { return RecordHeaderLen + n }

// Data appends a Data record whose body is an encoded stream frame.
func (e *Encoder) Data(slot SlotID, seq uint32, body []byte) error {
	if err := e.admit(len(body)); err != nil {
		return err
	}
	copy(e.record(Data, slot, seq, len(body)), body)
	return nil
}

// DataSpace appends a Data record of n bytes and returns its body, in the
// buffer, for the caller to fill. It lets a frame be encoded straight into
// the batch with no intermediate copy. The slice is valid until the next
// call on e.
func (e *Encoder) DataSpace(slot SlotID, seq uint32, n int) ([]byte, error) {
	if n < 0 {
		return nil, ErrBodyTooLarge
	}
	if err := e.admit(n); err != nil {
		return nil, err
	}
	b := e.record(Data, slot, seq, n)
	clear(b) // a reused buffer: a caller that fills less must not send an old batch's bytes
	return b[:n:n], nil
}

// OpenSlot appends the attach handshake for slot.
func (e *Encoder) OpenSlot(slot SlotID, seq uint32, anchorID, sessionID uint64) error {
	if err := e.admit(OpenSlotBodyLen); err != nil {
		return err
	}
	b := e.record(OpenSlot, slot, seq, OpenSlotBodyLen)
	be.PutUint64(b, anchorID)
	be.PutUint64(b[8:], sessionID)
	return nil
}

// CloseSlot appends a close with its reason.
func (e *Encoder) CloseSlot(slot SlotID, seq uint32, reason CloseReason) error {
	if !reason.Known() {
		return ErrBadReason
	}
	if err := e.admit(CloseSlotBodyLen); err != nil {
		return err
	}
	e.record(CloseSlot, slot, seq, CloseSlotBodyLen)[0] = byte(reason)
	return nil
}

// CreditUpdate appends a grant of delta more data credits for slot.
func (e *Encoder) CreditUpdate(slot SlotID, seq uint32, delta uint32) error {
	if err := e.admit(CreditUpdateBodyLen); err != nil {
		return err
	}
	be.PutUint32(e.record(CreditUpdate, slot, seq, CreditUpdateBodyLen), delta)
	return nil
}

// SlotHeartbeat appends a bodiless heartbeat. The format reserves it: no
// sender emits it yet (heartbeats ride as Data records), but its layout is
// fixed so that ingress can take it.
func (e *Encoder) SlotHeartbeat(slot SlotID, seq uint32) error {
	if err := e.admit(SlotHeartbeatBodyLen); err != nil {
		return err
	}
	e.record(SlotHeartbeat, slot, seq, SlotHeartbeatBodyLen)
	return nil
}

// LifecycleSlot appends a stop or cancel for the stream whose OpenSlot
// carried sessionID. The session travels so that a late signal cannot hit a
// later stream on a reused slot id.
func (e *Encoder) LifecycleSlot(slot SlotID, seq uint32, sessionID uint64, action LifecycleAction) error {
	if !action.Known() {
		return ErrBadAction
	}
	if err := e.admit(LifecycleSlotBodyLen); err != nil {
		return err
	}
	b := e.record(LifecycleSlot, slot, seq, LifecycleSlotBodyLen)
	be.PutUint64(b, sessionID)
	b[8] = byte(action)
	return nil
}

// admit checks, before any byte is written, that one more record with a
// body of n bytes may join the batch.
func (e *Encoder) admit(n int) error {
	switch {
	case !e.started:
		return ErrNotStarted
	case e.count == MaxRecords:
		return ErrBatchFull
	case uint64(n) > math.MaxUint32:
		return ErrBodyTooLarge
	}
	return nil
}

// record appends a record header and room for its body of n bytes,
// counts the record in the batch header, and returns the body for the
// caller to fill whole (its bytes are not zeroed). The buffer grows once
// and is stored once per record: e.buf is a pointer, and each store of
// it is a write barrier while the GC runs (four appends per header were a
// fifth of building a credit batch).
func (e *Encoder) record(t RecordType, slot SlotID, seq uint32, n int) []byte {
	b := slices.Grow(e.buf, RecordHeaderLen+n)
	at := len(b)
	b = b[:at+RecordHeaderLen+n]
	h := b[at : at+RecordHeaderLen]
	h[0] = byte(t)
	be.PutUint32(h[1:], uint32(slot))
	be.PutUint32(h[5:], seq)
	be.PutUint32(h[9:], uint32(n))
	e.count++
	be.PutUint16(b[e.start+2:], e.count)
	e.buf = b
	return b[at+RecordHeaderLen:]
}
