package mpread

import "math"

// Uint reads a non-negative integer of any width, as serde reads a u64: a
// signed form is taken when its value is not negative.
func (r *Reader) Uint() (uint64, error) {
	t, err := r.Byte()
	if err != nil {
		return 0, err
	}
	switch {
	case t < 0x80:
		return uint64(t), nil
	case t >= 0xcc && t <= 0xcf:
		return r.BigEndian(1 << (t - 0xcc))
	case t >= 0xd0 && t <= 0xd3:
		v, err := r.BigEndian(1 << (t - 0xd0))
		if err != nil {
			return 0, err
		}
		w := uint(8 << (t - 0xd0))
		if v>>(w-1)&1 == 1 { // sign bit set: negative
			return 0, r.Errorf("negative integer where a u64 belongs")
		}
		return v, nil
	}
	return 0, r.Errorf("expected an unsigned integer, got 0x%02x", t)
}

// Int reads an integer of any width that fits in an int64.
func (r *Reader) Int() (int64, error) {
	t, err := r.Byte()
	if err != nil {
		return 0, err
	}
	switch {
	case t < 0x80:
		return int64(t), nil
	case t >= 0xe0:
		return int64(int8(t)), nil
	case t >= 0xcc && t <= 0xcf:
		u, err := r.BigEndian(1 << (t - 0xcc))
		if err != nil {
			return 0, err
		}
		if u > math.MaxInt64 {
			return 0, r.Errorf("integer %d too large", u)
		}
		return int64(u), nil
	case t >= 0xd0 && t <= 0xd3:
		w := 1 << (t - 0xd0)
		u, err := r.BigEndian(w)
		if err != nil {
			return 0, err
		}
		shift := 64 - 8*w // sign-extend from w bytes
		return int64(u<<shift) >> shift, nil
	}
	return 0, r.Errorf("expected an integer, got 0x%02x", t)
}
