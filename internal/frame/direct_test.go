package frame

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/velo-go/velo/ext"
)

// directStream is a small Response, a large one and a small Event.
func directStream(big []byte) []byte {
	var b []byte
	b = Append(b, ext.Frame{Type: ext.Response, Header: []byte("h1"), Payload: []byte("small")})
	b = Append(b, ext.Frame{Type: ext.Response, Header: []byte("big"), Payload: big})
	return Append(b, ext.Frame{Type: ext.Event, Header: []byte("h3"), Payload: []byte("after")})
}

// payloads reads to the end of the stream and returns copies of the
// payloads Next gave.
func payloads(t *testing.T, r *Reader) [][]byte {
	t.Helper()
	fs, err := readAll(r)
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	var out [][]byte
	for _, f := range fs {
		out = append(out, bytes.Clone(f.Payload))
	}
	releaseAll(fs)
	return out
}

func bigPayload() []byte {
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	return big
}

// A payload taken by Direct lands whole in its slice, is not returned by
// Next, and the frames around it still come out right.
func TestReaderDirectTakesALargePayload(t *testing.T) {
	big := bigPayload()
	stream := directStream(big)
	r := NewReader(&chunkedReader{data: stream, sizes: []int{5000, 70000, 3}}, 1<<20)
	var got []byte
	var doneErr error
	calls := 0
	r.Direct = func(typ ext.MessageType, header []byte, n int) ([]byte, func(error)) {
		calls++
		if typ != ext.Response || string(header) != "big" || n != len(big) {
			t.Errorf("asked for %v %q %d", typ, header, n)
		}
		got = make([]byte, n)
		return got, func(err error) { doneErr = err; calls += 100 }
	}
	var seen []string
	for _, p := range payloads(t, r) {
		seen = append(seen, string(p))
	}
	if calls != 101 || doneErr != nil {
		t.Fatalf("Direct asked %d times (+100 per done), done err %v", calls, doneErr)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("the direct payload differs from what was sent")
	}
	if len(seen) != 2 || seen[0] != "small" || seen[1] != "after" {
		t.Fatalf("Next gave %q, want the two small frames", seen)
	}
	if r.Offset() != int64(len(stream)) {
		t.Fatalf("offset %d, want %d", r.Offset(), len(stream))
	}
}

// A payload Direct turns down is read the usual way, and Direct is asked
// once for it however many reads it takes.
func TestReaderDirectDeclined(t *testing.T) {
	big := bigPayload()
	r := NewReader(&chunkedReader{data: directStream(big), sizes: []int{4096}}, 1<<20)
	asked := 0
	r.Direct = func(ext.MessageType, []byte, int) ([]byte, func(error)) { asked++; return nil, nil }
	frames := payloads(t, r)
	if asked != 1 || len(frames) != 3 || !bytes.Equal(frames[1], big) {
		t.Fatalf("asked %d times, %d frames", asked, len(frames))
	}
}

// A stream that ends inside a direct payload tells done, and Next.
func TestReaderDirectCutShort(t *testing.T) {
	big := bigPayload()
	stream := directStream(big)
	cut := stream[:len(stream)-len("after")-20-len(big)/2]
	r := NewReader(&chunkedReader{data: cut, sizes: []int{8192}}, 1<<20)
	var doneErr error
	r.Direct = func(_ ext.MessageType, _ []byte, n int) ([]byte, func(error)) {
		return make([]byte, n), func(err error) { doneErr = err }
	}
	f, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
	if _, err := r.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Next: %v, want io.ErrUnexpectedEOF", err)
	}
	if !errors.Is(doneErr, io.ErrUnexpectedEOF) {
		t.Fatalf("done: %v, want io.ErrUnexpectedEOF", doneErr)
	}
}
