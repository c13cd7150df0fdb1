package frame

import (
	"bytes"
	"testing"

	"github.com/velo-go/velo/ext"
)

// loopReader hands out data again and again, at most piece bytes a read,
// as a socket would under a steady sender.
type loopReader struct {
	data  []byte
	off   int
	piece int
}

func (l *loopReader) Read(p []byte) (int, error) {
	p = p[:min(len(p), l.piece)]
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.data[l.off:])
		l.off = (l.off + c) % len(l.data)
		n += c
	}
	return n, nil
}

func benchRead(b *testing.B, f ext.Frame, piece int) {
	data := Append(nil, f)
	b.SetBytes(int64(len(data)))
	r := NewReader(&loopReader{data: data, piece: piece}, DefaultMaxFrame)
	defer r.Close()
	b.ResetTimer()
	for range b.N {
		got, err := r.Next()
		if err != nil {
			b.Fatal(err)
		}
		got.Release()
	}
}

// BenchmarkReaderLargeFrame reads 8 MiB frames that arrive 256 KiB a read:
// the cost of growing the buffer as the frame arrives.
func BenchmarkReaderLargeFrame(b *testing.B) {
	benchRead(b, ext.Frame{Type: ext.Message, Payload: bytes.Repeat([]byte{7}, 8<<20)}, 256<<10)
}

// BenchmarkReaderSmallFrames reads 64-byte frames from a sender that is
// always ahead.
func BenchmarkReaderSmallFrames(b *testing.B) {
	benchRead(b, ext.Frame{Type: ext.Message, Header: []byte("hdr"), Payload: bytes.Repeat([]byte{7}, 50)}, 1<<30)
}
