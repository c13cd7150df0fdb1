package wire

import "strconv"

// DecodeHeader reads the batch header without judging it. Ingress uses it to
// meter a batch it is about to drop (stale epoch, wrong version) by its
// epoch, sequence and count; Decode is the check that matters.
func DecodeHeader(p []byte) (BatchHeader, error) {
	if len(p) < BatchHeaderLen {
		return BatchHeader{}, refuse(ErrTruncated, 0, "batch of "+itoa(len(p))+" bytes is shorter than the 16-byte header")
	}
	return BatchHeader{
		Version: p[0],
		Flags:   p[1],
		Count:   be.Uint16(p[2:]),
		Epoch:   be.Uint64(p[4:]),
		Seq:     be.Uint32(p[12:]),
	}, nil
}

// Batch is a payload that Decode has accounted for byte by byte.
type Batch struct {
	Header  BatchHeader
	payload []byte
}

// Decode checks a whole _stream_batch payload: the header, then every
// record, then that nothing follows the last one. Checking everything before
// ingress applies anything means a bad batch is refused whole, never half
// applied. On a refusal the returned Batch still carries the header when the
// payload held one, for metering.
func Decode(p []byte) (Batch, error) {
	h, err := DecodeHeader(p)
	if err != nil {
		return Batch{}, err
	}
	b := Batch{Header: h}
	if h.Version != Version {
		return b, refuse(ErrVersion, 0, "mux_version "+itoa(int(h.Version))+", want "+itoa(Version))
	}
	if h.Flags&0xf0 != 0 {
		return b, refuse(ErrReservedFlags, 1, "flags "+hex8(h.Flags))
	}
	off := BatchHeaderLen
	for i := 0; i < int(h.Count); i++ {
		if off == len(p) {
			return b, refuse(ErrCountMismatch, off, "header declares "+itoa(int(h.Count))+" records, payload ends after "+itoa(i))
		}
		_, next, err := parseRecord(p, off)
		if err != nil {
			return b, err
		}
		off = next
	}
	if off != len(p) {
		return b, refuse(ErrTrailingBytes, off, itoa(len(p)-off)+" bytes after "+itoa(int(h.Count))+" records")
	}
	b.payload = p
	return b, nil
}

// Lane is the lane the header names.
func (b Batch) Lane() int { return b.Header.Lane() }

// Len is the number of records.
func (b Batch) Len() int { return int(b.Header.Count) }

// Records starts a walk over the records in wire order.
func (b Batch) Records() Reader {
	return Reader{p: b.payload, off: BatchHeaderLen, left: int(b.Header.Count)}
}

// Reader walks the records of a decoded batch. It holds no copy of anything.
type Reader struct {
	p    []byte
	off  int
	left int
}

// Next returns the next record, or false after the last one.
func (r *Reader) Next() (Record, bool) {
	if r.left == 0 {
		return Record{}, false
	}
	rec, next, err := parseRecord(r.p, r.off)
	if err != nil {
		// Decode has checked every record, so this means a Reader made from
		// something other than a Batch; stop rather than yield garbage.
		r.left = 0
		return Record{}, false
	}
	r.off, r.left = next, r.left-1
	return rec, true
}

// Record is one record of a batch. Body is the raw body of any type, as a
// sub-slice of the payload with its capacity cut at the body's end, so that
// an append to it copies instead of overwriting the next record. The typed
// fields are set for the types that carry them and zero otherwise.
type Record struct {
	Type RecordType
	Slot SlotID
	// Seq is frame_seq: the per-slot sequence that orders a stream.
	Seq  uint32
	Body []byte
	// Offset is where the record header starts in the payload.
	Offset int

	AnchorID  uint64          // OpenSlot
	SessionID uint64          // OpenSlot, LifecycleSlot
	Reason    CloseReason     // CloseSlot
	Credit    uint32          // CreditUpdate
	Action    LifecycleAction // LifecycleSlot
}

// parseRecord reads the record whose header starts at off and returns it
// with the offset just past it. It trusts no field until the bytes behind
// it are in hand.
func parseRecord(p []byte, off int) (Record, int, error) {
	if len(p)-off < RecordHeaderLen {
		return Record{}, 0, refuse(ErrTruncated, off, "record header needs 13 bytes, "+itoa(len(p)-off)+" remain")
	}
	rec := Record{
		Type:   RecordType(p[off]),
		Slot:   SlotID(be.Uint32(p[off+1:])),
		Seq:    be.Uint32(p[off+5:]),
		Offset: off,
	}
	if !rec.Type.Known() {
		return Record{}, 0, refuse(ErrUnknownType, off, "record_type "+itoa(int(rec.Type)))
	}
	start := off + RecordHeaderLen
	n := uint64(be.Uint32(p[off+9:]))
	if n > uint64(len(p)-start) {
		return Record{}, 0, refuse(ErrTruncated, off, "body of "+utoa(n)+" bytes, "+itoa(len(p)-start)+" remain")
	}
	end := start + int(n)
	rec.Body = p[start:end:end]
	if err := parseBody(&rec); err != nil {
		return Record{}, 0, err
	}
	return rec, end, nil
}

// parseBody checks a body's size against its type and reads its fields.
func parseBody(rec *Record) error {
	b := rec.Body
	if want := rec.Type.fixedBodyLen(); want >= 0 && len(b) != want {
		return refuse(ErrBodyLength, rec.Offset, rec.Type.String()+" body of "+itoa(len(b))+" bytes, want "+itoa(want))
	}
	switch rec.Type {
	case OpenSlot:
		rec.AnchorID, rec.SessionID = be.Uint64(b), be.Uint64(b[8:])
	case CloseSlot:
		rec.Reason = CloseReason(b[0])
		if !rec.Reason.Known() {
			return refuse(ErrUnknownReason, rec.Offset, "reason "+itoa(int(b[0])))
		}
	case CreditUpdate:
		rec.Credit = be.Uint32(b)
	case LifecycleSlot:
		rec.SessionID, rec.Action = be.Uint64(b), LifecycleAction(b[8])
		if !rec.Action.Known() {
			return refuse(ErrUnknownAction, rec.Offset, "action "+itoa(int(b[8])))
		}
	}
	return nil
}

func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

func hex8(b uint8) string {
	const digits = "0123456789abcdef"
	return "0x" + string([]byte{digits[b>>4], digits[b&15]})
}
