package inlet

import (
	"context"
	"errors"
	"testing"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// TestPopBytes: a token's frame comes back as its payload, for a bin 8
// and a bin 16, a soft error as a *SenderError, and the end as an error.
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
		p, err := a.st.PopBytes(ctx)
		if err != nil || len(p) != n || (n > 0 && p[n-1] != byte(n-1)) {
			t.Fatalf("token of %d bytes: payload of %d, %v", n, len(p), err)
		}
	}
	if err := s.st.Push(ctx, &s.Sender, wire.AppendErrorFrame(nil, wire.KindSenderError, "soft")); err != nil {
		t.Fatal(err)
	}
	var soft *streamerr.SenderError
	if p, err := a.st.PopBytes(ctx); p != nil || !errors.As(err, &soft) || soft.Message != "soft" {
		t.Fatalf("soft error: payload %v, %v", p, err)
	}
	if err := s.Send(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if p, err := a.st.PopBytes(ctx); err != nil || string(p) != "after" {
		t.Fatalf("a token after the soft error: %q, %v", p, err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.st.PopBytes(ctx); err == nil {
		t.Fatal("PopBytes after Finalize returned no error")
	}
}
