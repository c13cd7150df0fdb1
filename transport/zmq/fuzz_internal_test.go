package zmq

import (
	"testing"
)

// The framing guard follows a stream the same way however it is cut into
// reads: scanning it whole and in two pieces gives the same verdict and
// the same state, and no frame above the cap passes.
func FuzzFramingScan(f *testing.F) {
	greeting := make([]byte, greetingLen)
	greeting[0] = 0xFF
	f.Add(append(append([]byte(nil), greeting...), 0x00, 0x03, 'a', 'b', 'c'), 3)
	f.Add(append(append([]byte(nil), greeting...), 0x02, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), 10) // 2^63 declared
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		const capBytes = 1 << 10
		var whole, split framing
		errWhole := whole.scanIn(b, capBytes)
		cut = min(max(cut, 0), len(b))
		errSplit := split.scanIn(b[:cut], capBytes)
		if errSplit == nil {
			errSplit = split.scanIn(b[cut:], capBytes)
		}
		if (errWhole == nil) != (errSplit == nil) {
			t.Fatalf("whole: %v, cut at %d: %v", errWhole, cut, errSplit)
		}
		if errWhole == nil && whole != split {
			t.Fatalf("states differ: %+v against %+v", whole, split)
		}
	})
}

// parseParts never panics, and what it accepts is within the cap and of a
// valid type.
func FuzzParseParts(f *testing.F) {
	f.Add([]byte{0}, []byte("hdr"), []byte("pl"), 2)
	f.Fuzz(func(t *testing.T, typ, header, payload []byte, n int) {
		parts := [][]byte{typ, header, payload}[:min(max(n, 0), 3)]
		fr, ok := parseParts(parts, 1<<10)
		if ok && (!fr.Type.Valid() || len(fr.Header)+len(fr.Payload) > 1<<10) {
			t.Fatalf("accepted %+v", fr)
		}
	})
}
