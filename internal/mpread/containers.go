package mpread

// IsMap reports whether c, a type byte, starts a map, so a caller can
// choose between readings without paying for an error.
func IsMap(c byte) bool { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }

// MapLen reads a map header and returns its number of entries. A count
// that could not fit in what is left (each entry takes at least two bytes)
// is refused, so a caller may size a map by it.
func (r *Reader) MapLen() (int, error) {
	t, err := r.Byte()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case t&0xf0 == 0x80:
		n = uint64(t & 0x0f)
	case t == 0xde:
		n, err = r.BigEndian(2)
	case t == 0xdf:
		n, err = r.BigEndian(4)
	default:
		return 0, r.Errorf("expected a map, got 0x%02x", t)
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.Len())/2 {
		return 0, r.Errorf("%d entries in %d bytes", n, r.Len())
	}
	return int(n), nil
}

// ArrayLen reads an array header and returns its number of elements,
// refusing more than the bytes left (each element takes at least one).
func (r *Reader) ArrayLen() (int, error) {
	t, err := r.Byte()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case t&0xf0 == 0x90:
		n = uint64(t & 0x0f)
	case t == 0xdc:
		n, err = r.BigEndian(2)
	case t == 0xdd:
		n, err = r.BigEndian(4)
	default:
		return 0, r.Errorf("expected an array, got 0x%02x", t)
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.Len()) {
		return 0, r.Errorf("%d elements in %d bytes", n, r.Len())
	}
	return int(n), nil
}

// Skip steps over exactly one value. It keeps a count of the values still
// owed instead of recursing, so hostile nesting costs no stack, and it
// refuses a container that announces more elements than bytes remain.
func (r *Reader) Skip() error {
	owed := uint64(1)
	for owed > 0 {
		owed--
		n, elems, err := r.skipHeader()
		if err != nil {
			return err
		}
		if n > 0 {
			if _, err := r.Take(n); err != nil {
				return err
			}
		}
		owed += elems
		if owed > uint64(r.Len()) {
			return r.Errorf("%d values announced with %d bytes left", owed, r.Len())
		}
	}
	return nil
}

// skipHeader reads one type byte and whatever length follows it, and says
// how many data bytes and how many nested values come after.
func (r *Reader) skipHeader() (n, elems uint64, err error) {
	t, err := r.Byte()
	if err != nil {
		return 0, 0, err
	}
	switch {
	case t < 0x80 || t >= 0xe0: // positive and negative fixint
	case t&0xf0 == 0x80: // fixmap
		elems = 2 * uint64(t&0x0f)
	case t&0xf0 == 0x90: // fixarray
		elems = uint64(t & 0x0f)
	case t&0xe0 == 0xa0: // fixstr
		n = uint64(t & 0x1f)
	case t == 0xc0, t == 0xc2, t == 0xc3: // nil, false, true
	case t == 0xc1:
		return 0, 0, r.Errorf("reserved byte 0xc1")
	case t == 0xc4 || t == 0xd9: // bin8, str8
		n, err = r.BigEndian(1)
	case t == 0xc5 || t == 0xda: // bin16, str16
		n, err = r.BigEndian(2)
	case t == 0xc6 || t == 0xdb: // bin32, str32
		n, err = r.BigEndian(4)
	case t >= 0xc7 && t <= 0xc9: // ext8, ext16, ext32: length, then type
		n, err = r.BigEndian(1 << (t - 0xc7))
		n++
	case t == 0xca, t == 0xce, t == 0xd2: // float32, uint32, int32
		n = 4
	case t == 0xcb, t == 0xcf, t == 0xd3: // float64, uint64, int64
		n = 8
	case t == 0xcc, t == 0xd0: // uint8, int8
		n = 1
	case t == 0xcd, t == 0xd1: // uint16, int16
		n = 2
	case t >= 0xd4 && t <= 0xd8: // fixext 1, 2, 4, 8, 16
		n = 1 + 1<<(t-0xd4)
	case t == 0xdc: // array16
		elems, err = r.BigEndian(2)
	case t == 0xdd: // array32
		elems, err = r.BigEndian(4)
	case t == 0xde: // map16
		elems, err = r.BigEndian(2)
		elems *= 2
	case t == 0xdf: // map32
		elems, err = r.BigEndian(4)
		elems *= 2
	}
	return n, elems, err
}
