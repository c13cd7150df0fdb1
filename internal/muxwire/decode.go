package muxwire

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

// Batch is a payload that Decode has accounted for byte by byte. It refers
// to the payload, which must not change while its records are in use.
type Batch struct {
	// Header is a copy for the caller to read; the walk does not trust it.
	Header  BatchHeader
	payload []byte
	count   int
}

// Decode checks a whole _stream_batch payload: the header, then every
// record, then that nothing follows the last one. Checking everything before
// ingress applies anything means a bad batch is refused whole, never half
// applied. On a refusal the returned Batch still carries the header when the
// payload held one, for metering, and walks no records.
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
		if off, err = checkRecord(p, off); err != nil {
			return b, err
		}
	}
	if off != len(p) {
		return b, refuse(ErrTrailingBytes, off, itoa(len(p)-off)+" bytes after "+itoa(int(h.Count))+" records")
	}
	b.payload, b.count = p, int(h.Count)
	return b, nil
}

// Lane is the lane the header names.
func (b Batch) Lane() int { return b.Header.Lane() }

// Len is the number of records.
func (b Batch) Len() int { return b.count }

// Records starts a walk over the records in wire order.
func (b Batch) Records() Reader {
	return Reader{p: b.payload, off: BatchHeaderLen, left: b.count}
}

// Reader walks the records of a decoded batch. It holds no copy of anything.
type Reader struct {
	p    []byte
	off  int
	left int
}

// Next returns the next record, or false after the last one. It repeats
// none of Decode's checks, only the bounds, so that a payload changed after
// Decode (a reused buffer) ends the walk instead of panicking.
func (r *Reader) Next() (Record, bool) {
	p, off := r.p, r.off
	if r.left == 0 || len(p)-off < RecordHeaderLen {
		return Record{}, false
	}
	start := off + RecordHeaderLen
	end := start + int(be.Uint32(p[off+9:]))
	if end > len(p) || end < start {
		r.left = 0
		return Record{}, false
	}
	r.off, r.left = end, r.left-1
	return Record{
		Type:   RecordType(p[off]),
		Slot:   SlotID(be.Uint32(p[off+1:])),
		Seq:    be.Uint32(p[off+5:]),
		Body:   p[start:end:end],
		Offset: off,
	}, true
}

// Record is one record of a batch. Body is the raw body of any type, as a
// sub-slice of the payload with its capacity cut at the body's end, so that
// an append to it copies instead of overwriting the next record. The
// methods read the fields of the control bodies; each returns zero values
// for a record of another type.
type Record struct {
	Type RecordType
	Slot SlotID
	// Seq is frame_seq: the per-slot sequence that orders a stream.
	Seq  uint32
	Body []byte
	// Offset is where the record header starts in the payload.
	Offset int
}

// OpenSlot reads an OpenSlot body: the anchor and the session it claims.
func (r Record) OpenSlot() (anchorID, sessionID uint64) {
	if r.Type != OpenSlot || len(r.Body) != OpenSlotBodyLen {
		return 0, 0
	}
	return be.Uint64(r.Body), be.Uint64(r.Body[8:])
}

// CloseReason reads a CloseSlot body.
func (r Record) CloseReason() CloseReason {
	if r.Type != CloseSlot || len(r.Body) != CloseSlotBodyLen {
		return 0
	}
	return CloseReason(r.Body[0])
}

// Credit reads a CreditUpdate body: the data credits granted.
func (r Record) Credit() uint32 {
	if r.Type != CreditUpdate || len(r.Body) != CreditUpdateBodyLen {
		return 0
	}
	return be.Uint32(r.Body)
}

// Lifecycle reads a LifecycleSlot body: the session it targets and the
// action.
func (r Record) Lifecycle() (sessionID uint64, action LifecycleAction) {
	if r.Type != LifecycleSlot || len(r.Body) != LifecycleSlotBodyLen {
		return 0, 0
	}
	return be.Uint64(r.Body), LifecycleAction(r.Body[8])
}

// checkRecord checks the record whose header starts at off and returns the
// offset just past it. It trusts no field until the bytes behind it are in
// hand.
func checkRecord(p []byte, off int) (int, error) {
	if len(p)-off < RecordHeaderLen {
		return 0, refuse(ErrTruncated, off, "record header needs 13 bytes, "+itoa(len(p)-off)+" remain")
	}
	t := RecordType(p[off])
	if !t.Known() {
		return 0, refuse(ErrUnknownType, off, "record_type "+itoa(int(t)))
	}
	start := off + RecordHeaderLen
	n := uint64(be.Uint32(p[off+9:]))
	if n > uint64(len(p)-start) {
		return 0, refuse(ErrTruncated, off, "body of "+utoa(n)+" bytes, "+itoa(len(p)-start)+" remain")
	}
	end := start + int(n)
	return end, checkBody(t, p[start:end], off)
}

// checkBody checks a body's size against its type, and the values of the
// one-byte enums.
func checkBody(t RecordType, b []byte, off int) error {
	if want := t.fixedBodyLen(); want >= 0 && len(b) != want {
		return refuse(ErrBodyLength, off, t.String()+" body of "+itoa(len(b))+" bytes, want "+itoa(want))
	}
	switch {
	case t == CloseSlot && !CloseReason(b[0]).Known():
		return refuse(ErrUnknownReason, off, "reason "+itoa(int(b[0])))
	case t == LifecycleSlot && !LifecycleAction(b[8]).Known():
		return refuse(ErrUnknownAction, off, "action "+itoa(int(b[8])))
	}
	return nil
}

func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

func hex8(b uint8) string {
	const digits = "0123456789abcdef"
	return "0x" + string([]byte{digits[b>>4], digits[b&15]})
}
