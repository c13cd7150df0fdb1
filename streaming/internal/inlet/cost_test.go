package inlet

import (
	"context"
	"testing"

	wire "github.com/velo-go/velo/internal/streamwire"
)

// TestPopBytes: a token's frame comes back as its payload, for a bin 8
// and a bin 16, and any other frame as Pop returns it.
func TestPopBytes(t *testing.T) {
	a, s := newPair(t, newTestHome())
	ctx := context.Background()
	for _, n := range []int{0, 40, 255, 256, 300} {
		tok := make([]byte, n)
		for i := range tok {
			tok[i] = byte(i)
		}
		if err := s.Send(ctx, tok); err != nil {
			t.Fatal(err)
		}
		p, f, err := a.st.PopBytes(ctx)
		if err != nil || f.Kind != 0 || len(p) != n || (n > 0 && p[n-1] != byte(n-1)) {
			t.Fatalf("token of %d bytes: payload of %d, frame kind %v, %v", n, len(p), f.Kind, err)
		}
	}
	if err := s.st.Push(ctx, &s.Sender, wire.AppendErrorFrame(nil, wire.KindSenderError, "soft")); err != nil {
		t.Fatal(err)
	}
	if p, f, err := a.st.PopBytes(ctx); err != nil || p != nil || f.Kind != wire.KindSenderError || f.Message != "soft" {
		t.Fatalf("soft error: payload %v, frame %+v, %v", p, f, err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.st.PopBytes(ctx); err == nil {
		t.Fatal("PopBytes after Finalize returned no error")
	}
}
