package rendezvous

import (
	"errors"
	"strconv"
)

// byteArray is serde's Vec<u8> in JSON: an array of numbers, one per
// byte ([1,1,0,...]), not encoding/json's base64 string. It carries the
// RDMA descriptor, whose bytes end up in front of a backend's key
// unpacking, so the decoder takes exactly that shape: each element an
// integer 0..255 written without sign, fraction or exponent. Anything
// else refuses the whole answer.
type byteArray []byte

var errByteArray = errors.New("rendezvous: expected an array of integers 0..255")

// MarshalJSON writes the array form; nil is [] (a Vec is never null).
func (a byteArray) MarshalJSON() ([]byte, error) {
	out := make([]byte, 0, 2+4*len(a))
	out = append(out, '[')
	for i, v := range a {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, uint64(v), 10)
	}
	return append(out, ']'), nil
}

// UnmarshalJSON reads the array form. encoding/json hands it one value it
// has already checked for JSON syntax, so only the shape is checked here.
// Each element costs at least two input bytes (a digit and a separator),
// so the buffer is sized from the input, never from a stated count.
func (a *byteArray) UnmarshalJSON(b []byte) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return errByteArray
	}
	out := make([]byte, 0, len(b)/2)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		*a = out
		return nil
	}
	for {
		v, j, ok := byteNumber(b, i)
		if !ok {
			return errByteArray
		}
		out = append(out, v)
		i = skipSpace(b, j)
		if i >= len(b) {
			return errByteArray
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			*a = out
			return nil
		default:
			return errByteArray
		}
	}
}

// byteNumber reads one element at i: 1 to 3 digits, at most 255, followed
// by something that is not part of a number.
func byteNumber(b []byte, i int) (byte, int, bool) {
	v, n := 0, 0
	for i+n < len(b) && b[i+n] >= '0' && b[i+n] <= '9' {
		v = v*10 + int(b[i+n]-'0')
		n++
		if n > 3 || v > 255 {
			return 0, 0, false
		}
	}
	if n == 0 || (n > 1 && b[i] == '0') {
		return 0, 0, false
	}
	if i+n < len(b) {
		switch b[i+n] {
		case '.', 'e', 'E':
			return 0, 0, false
		}
	}
	return byte(v), i + n, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
