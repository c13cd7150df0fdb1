package mpwrite

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Every writer agrees with a MessagePack library on the value and picks
// the smallest form, at each boundary of the forms.
func TestWritersMatchALibrary(t *testing.T) {
	for _, v := range []int64{0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64} {
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		enc.UseCompactInts(true) // the smallest form, as rmp writes
		if err := enc.EncodeInt(v); err != nil {
			t.Fatal(err)
		}
		want := buf.Bytes()
		if got := AppendInt(nil, v); !bytes.Equal(got, want) {
			t.Errorf("AppendInt(%d) = %x, want %x", v, got, want)
		}
	}
	for _, n := range []int{0, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("x", n)
		want, _ := msgpack.Marshal(s)
		if got := AppendStr(nil, s); !bytes.Equal(got, want) {
			t.Errorf("AppendStr(%d bytes): header %x, want %x", n, got[:min(5, len(got))], want[:min(5, len(want))])
		}
		bin := make([]byte, n)
		wantBin, _ := msgpack.Marshal(bin)
		if got := append(AppendBinHeader(nil, n), bin...); !bytes.Equal(got, wantBin) {
			t.Errorf("AppendBinHeader(%d): %x, want %x", n, got[:min(5, len(got))], wantBin[:min(5, len(wantBin))])
		}
	}
}
