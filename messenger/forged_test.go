package messenger_test

import (
	"context"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/messenger"
)

// TestForgedRepliesNeverCompleteACall: a third party with a raw connection
// to an honest node sends it 100,000 requests whose response ids name a
// victim's worker and guessed slots. The honest node answers each to the
// victim, as the protocol says it must. Before response ids carried a
// random generation, slot tokens were gen<<32|idx+1 and about 256 such
// frames completed the victim's pending Unary with the attacker's answer.
// Now the victim checks all 128 bits: its call gets its own answer, and
// every forged reply is counted and dropped.
func TestForgedRepliesNeverCompleteACall(t *testing.T) {
	const forged = 100_000
	victim, honest := pair(t, nil, nil)
	started, release := make(chan struct{}), newGate(t)
	must(t, honest.Register(messenger.UnaryHandler("slow", func(*messenger.Context) ([]byte, error) {
		close(started)
		release.wait()
		return []byte("real"), nil
	})))
	must(t, honest.Register(messenger.UnaryHandler("echo", func(*messenger.Context) ([]byte, error) {
		return []byte("forged"), nil
	}, messenger.WithInline())))

	answer := make(chan []byte, 1)
	go func() {
		resp, err := victim.Unary(context.Background(), honest.InstanceID(), "slow", nil)
		if err != nil {
			resp = []byte("error: " + err.Error())
		}
		answer <- resp
	}()
	recv(t, started, "the victim's call to reach the handler")
	before := victim.Messenger().UnmatchedReplies()

	// Guesses: the low slots, with small generations (what a counter would
	// give) and with generations spread over the 48 bits.
	conn := rawConn(t, honest)
	proveAs(t, conn, victim) // the forger's requests run: what it forges is the replies
	var buf []byte
	for i := range forged {
		slot, gen := uint64(i%8), uint64(i/8+1)
		if i%2 == 1 {
			gen = uint64(i) * 0x9e3779b97f4a7c15 >> 16 // spread, nonzero
		}
		hdr := wireRequestHeader(byte(messenger.UnaryResponse), uint64(victim.WorkerID()), gen<<16|slot, "echo", nil)
		buf = frame.Append(buf, ext.Frame{Type: ext.Message, Header: hdr})
		if len(buf) > 64<<10 || i == forged-1 {
			_, err := conn.Write(buf)
			must(t, err)
			buf = buf[:0]
		}
	}
	waitFor(t, "every forged reply to reach the victim", func() bool {
		return victim.Messenger().UnmatchedReplies()-before >= forged
	})
	select {
	case resp := <-answer:
		t.Fatalf("the victim's call completed before its handler answered, with %q", resp)
	default:
	}
	release.open()
	if resp := recv(t, answer, "the victim's own answer"); string(resp) != "real" {
		t.Fatalf("the victim's call returned %q, want its own answer", resp)
	}
	if got := victim.Messenger().UnmatchedReplies() - before; got != forged {
		t.Fatalf("victim counted %d unmatched replies, want %d", got, forged)
	}
}
