package frame

import (
	"bytes"
	"testing"

	"github.com/velo-go/velo/ext"
)

// copiedDirect counts, for each payload Direct takes, how many of its
// bytes were already in the Reader's buffer (and so copied out of it)
// when Direct was asked: the rest are read straight into place.
type copiedDirect struct {
	r      *Reader
	copied []int
	got    [][]byte
}

func (c *copiedDirect) direct(_ ext.MessageType, header []byte, n int) ([]byte, func(error)) {
	// What is buffered past the preamble and header is the payload's head.
	buffered := c.r.end - c.r.start - PreambleLen - len(header)
	c.copied = append(c.copied, buffered)
	dst := make([]byte, n)
	return dst, func(err error) {
		if err == nil {
			c.got = append(c.got, dst)
		}
	}
}

// After a payload went to Direct, the next read is small, so a run of
// large payloads (a transfer's chunks) is copied out of the buffer only at
// its first one: the later ones have at most directPeek bytes in it when
// Direct takes them, however much the socket could give at once.
func TestReaderDirectPeeksAfterADirectPayload(t *testing.T) {
	big := bigPayload()
	var stream []byte
	for range 4 {
		stream = Append(stream, ext.Frame{Type: ext.Response, Header: []byte("big"), Payload: big})
	}
	stream = Append(stream, ext.Frame{Type: ext.Event, Header: []byte("h"), Payload: []byte("after")})
	// A reader that always has everything: each read fills what it is given.
	r := NewReader(&chunkedReader{data: stream, sizes: []int{len(stream)}}, 1<<20)
	c := &copiedDirect{r: r}
	r.Direct = c.direct
	var seen []string
	for _, p := range payloads(t, r) {
		seen = append(seen, string(p))
	}
	if len(seen) != 1 || seen[0] != "after" {
		t.Fatalf("Next gave %q, want the small frame", seen)
	}
	if len(c.got) != 4 {
		t.Fatalf("%d payloads went to Direct, want 4", len(c.got))
	}
	for i, g := range c.got {
		if !bytes.Equal(g, big) {
			t.Fatalf("direct payload %d differs from what was sent", i)
		}
	}
	for i, n := range c.copied[1:] {
		if n > directPeek {
			t.Fatalf("payload %d had %d bytes buffered when Direct took it, want at most %d", i+1, n, directPeek)
		}
	}
}
