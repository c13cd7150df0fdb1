package streamwire

import "testing"

// tokenFrames are tokens' frames of both binary widths.
var tokenFrames = [][]byte{AppendBytesItem(nil, make([]byte, 8)), AppendBytesItem(nil, make([]byte, 300))}

// BytesItemPayload is a consumer's read of every token: it allocates
// nothing, for either width.
func TestBytesItemPayloadAllocatesNothing(t *testing.T) {
	for _, b := range tokenFrames {
		if a := testing.AllocsPerRun(100, func() {
			if _, ok := BytesItemPayload(b); !ok {
				t.Fatal("not a token")
			}
		}); a != 0 {
			t.Fatalf("%v allocations per token", a)
		}
	}
}

func BenchmarkBytesItemPayload(b *testing.B) {
	n := 0
	for b.Loop() {
		for _, f := range tokenFrames {
			p, _ := BytesItemPayload(f)
			n += len(p)
		}
	}
	if n == 0 {
		b.Fatal("no payload")
	}
}
