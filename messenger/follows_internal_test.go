package messenger

import (
	"context"
	"testing"
	"time"
)

// resumingOthers counts the replies put in a waiting caller's channel
// that no one has taken out: true from the delivery until the caller takes
// its reply, or until the slot is freed with the reply still in it (the
// caller gave up). A count left over would mark every later request of a
// lone caller as followed, and send it to the writer goroutine instead of
// writing it inline: fails if freeLocked does not take its drained reply
// off the count. Asynchronous completions wake no caller and do not count.
func TestResumingCountsRepliesNotTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tb := newSlotTable(4, nil)
	if tb.resumingOthers() {
		t.Fatal("a fresh table has callers resuming")
	}
	idx, token, err := tb.acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !tb.deliver(token, reply{payload: []byte("a")}) {
		t.Fatal("deliver refused a live slot")
	}
	if !tb.resumingOthers() {
		t.Fatal("a reply waits in its channel, but no caller counts as resuming")
	}
	if _, err := tb.wait(ctx, idx); err != nil {
		t.Fatal(err)
	}
	tb.release(idx)
	if tb.resumingOthers() {
		t.Fatal("the caller took its reply, but still counts as resuming")
	}

	// The caller gave up (its context ended) while the reply came: the
	// slot is freed with the reply in it.
	idx, token, err = tb.acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	tb.deliver(token, reply{payload: []byte("b")})
	tb.release(idx)
	if n := tb.resuming.Load(); n != 0 {
		t.Fatalf("a reply drained by the slot's release left the count at %d", n)
	}

	token, ok := tb.acquireAsync(1, "h", func([]byte, error) {}, false, nil)
	if !ok {
		t.Fatal("acquireAsync found no slot")
	}
	tb.deliver(token, reply{})
	if n := tb.resuming.Load(); n != 0 {
		t.Fatalf("an asynchronous completion counted %d resuming callers", n)
	}
}
