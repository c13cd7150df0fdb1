package rendezvous_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/transport/tcp"
)

// holdTap is a node's transport with a hold on what it sends: while a
// hold is on, each frame that the hold's predicate picks waits in the tap,
// as a frame queued behind a slow socket waits in a transport, until
// open. A tap that says it retains owners keeps a held frame's Owner
// retained meanwhile, as tcp does with a frame it queues; one that says it
// does not keeps the bytes without telling anyone.
type holdTap struct {
	ext.Transport
	retains bool

	mu   sync.Mutex
	pick func(ext.Frame) bool // nil: no hold
	held []heldFrame
	n    chan struct{} // one token per frame held
}

type heldFrame struct {
	target ext.InstanceID
	f      ext.Frame
}

func (t *holdTap) Unwrap() ext.Transport { return t.Transport }
func (t *holdTap) RetainsOwners() bool   { return t.retains }

func (t *holdTap) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	t.mu.Lock()
	if t.pick != nil && t.pick(f) {
		if t.retains && f.Owner != nil {
			f.Owner.Retain()
		}
		t.held = append(t.held, heldFrame{target, f})
		t.mu.Unlock()
		t.n <- struct{}{}
		return ext.AdmittedOutcome, nil
	}
	t.mu.Unlock()
	return t.Transport.Send(target, f)
}

// hold starts holding the frames pick picks.
func (t *holdTap) hold(pick func(ext.Frame) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pick, t.n = pick, make(chan struct{}, 64)
}

// waitHeld waits until n frames are held.
func (t *holdTap) waitHeld(tb testing.TB, n int) {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-t.n:
		case <-timeout:
			tb.Fatalf("the tap never held %d frames", n)
		}
	}
}

// open ends the hold and sends what it held, in order.
func (t *holdTap) open() {
	t.mu.Lock()
	held := t.held
	t.pick, t.held = nil, nil
	t.mu.Unlock()
	for _, h := range held {
		t.Transport.Send(h.target, h.f)
		if t.retains && h.f.Owner != nil {
			h.f.Owner.Release()
		}
	}
}

// pullAnswers picks the answers that carry a chunk (tcp copies a frame
// of up to 64 KiB at Send; a chunk is 512 KiB).
func pullAnswers(f ext.Frame) bool { return f.Type == ext.Response && len(f.Payload) > 64<<10 }

// tappedPair is pair with the caller's transport under a holdTap.
func tappedPair(t *testing.T, retains bool) (tap *holdTap, caller, server *velo.Node, cm, sm *prometheus.Registry) {
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	tap = &holdTap{Transport: tr, retains: retains}
	caller, cm = newNodeOn(t, tap)
	server, sm = newNode(t)
	if err := caller.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tap.open) // nothing stays held past a failed test
	return tap, caller, server, cm, sm
}

// TestBlockingCallsLendAndOthersCopy: a staged Unary or Sync call hands the
// stager the caller's payload itself, with no copy on the sender, and its
// handler still sees the caller's bytes; a fire-and-forget Send and an
// UnaryAsync, which return before the receiver fetched, still copy.
func TestBlockingCallsLendAndOthersCopy(t *testing.T) {
	caller, server, _, _ := pair(t)
	seen := make(chan []byte, 4)
	record := func(c *velo.Context) { seen <- bytes.Clone(c.Payload) }
	if err := server.Register(velo.UnaryHandler("unary", func(c *velo.Context) ([]byte, error) { record(c); return []byte("ok"), nil })); err != nil {
		t.Fatal(err)
	}
	if err := server.Register(velo.SyncHandler("sync", func(c *velo.Context) error { record(c); return nil })); err != nil {
		t.Fatal(err)
	}
	if err := server.Register(velo.FireHandler("fire", record)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := pattern(3<<20 + 11)
	check := func(what string, copies int64, call func() error) {
		t.Helper()
		c0, s0 := rendezvous.StageCopies(), staged(caller)
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		select {
		case got := <-seen:
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: the handler saw other bytes", what)
			}
		case <-ctx.Done():
			t.Fatalf("%s: the handler never ran", what)
		}
		if n := staged(caller) - s0; n != 1 {
			t.Fatalf("%s: %d payloads staged, want 1", what, n)
		}
		if n := rendezvous.StageCopies() - c0; n != copies {
			t.Fatalf("%s: the sender copied %d payloads, want %d", what, n, copies)
		}
	}
	check("Unary", 0, func() error {
		_, err := caller.Unary(ctx, server.InstanceID(), "unary", want)
		return err
	})
	check("Sync", 0, func() error { return caller.Sync(ctx, server.InstanceID(), "sync", want) })
	check("Send", 1, func() error { return caller.Send(ctx, server.InstanceID(), "fire", want) })
	answered := make(chan error, 1)
	check("UnaryAsync", 1, func() error {
		return caller.UnaryAsync(ctx, server.InstanceID(), "unary", want, func(_ []byte, err error) { answered <- err })
	})
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every payload to be freed", func() bool { b, n := caller.Rendezvous.HeldBytes(); return b == 0 && n == 0 })
}

func staged(n *velo.Node) int64 { s, _ := n.Rendezvous.Transparent(); return s }

// TestLentPayloadReusedAfterAnswer: a caller that overwrites its buffer
// as soon as its staged call was answered changes nothing its receiver
// had (run it with -race: nothing of the node reads the buffer after the
// call returned).
func TestLentPayloadReusedAfterAnswer(t *testing.T) {
	caller, server, _, _ := pair(t)
	seen := make(chan []byte, 1)
	if err := server.Register(velo.UnaryHandler("h", func(c *velo.Context) ([]byte, error) {
		seen <- bytes.Clone(c.Payload)
		return nil, nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	buf := make([]byte, 2*rendezvous.ChunkSize+3)
	for i := range 8 {
		for j := range buf {
			buf[j] = byte(i + j)
		}
		want := bytes.Clone(buf)
		if _, err := caller.Unary(ctx, server.InstanceID(), "h", buf); err != nil {
			t.Fatal(err)
		}
		for j := range buf {
			buf[j] = 0xEE
		}
		if got := <-seen; !bytes.Equal(got, want) {
			t.Fatalf("call %d: the handler saw other bytes", i)
		}
	}
	waitFor(t, "the caller's slots to be freed", func() bool { b, n := caller.Rendezvous.HeldBytes(); return b == 0 && n == 0 })
}

// TestLentPayloadReusedAfterReturn: the caller overwrites its buffer as
// soon as its staged call returns, whether the answer came, or it gave up
// (cancel or deadline) while the receiver was fetching, with pull answers
// that hold the caller's bytes still unwritten in the transport. The
// receiver gets the caller's bytes or an error, never a mix: the call
// returns only once the transport is done with those answers, and a pull
// that comes after is refused as not found.
func TestLentPayloadReusedAfterReturn(t *testing.T) {
	const chunk = rendezvous.ChunkSize
	for _, tc := range []struct {
		name     string
		size     int
		held     int  // pull answers the tap holds: all of them, or the first window of four
		deadline bool // the caller gives up at its deadline, else it cancels
		retains  bool // the caller's transport retains owners, else it gets copies
	}{
		{"cancel after every chunk was served", 3 * chunk, 3, false, true},
		{"cancel mid-fetch", 6*chunk + 5, 4, false, true},
		{"deadline after every chunk was served", 3 * chunk, 3, true, true},
		{"deadline mid-fetch", 6*chunk + 5, 4, true, true},
		{"cancel, a transport that keeps no owners", 3 * chunk, 3, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tap, caller, server, cm, _ := tappedPair(t, tc.retains)
			type outcome struct {
				payload []byte
				err     error // the receiver's fetch failed
			}
			got := make(chan outcome, 1)
			if err := server.Register(velo.UnaryHandler("h", func(c *velo.Context) ([]byte, error) {
				got <- outcome{payload: bytes.Clone(c.Payload)}
				return nil, nil
			}, msgrx.WithStagedFailure(func(_ ext.WorkerID, _ map[string]string, err error) { got <- outcome{err: err} }))); err != nil {
				t.Fatal(err)
			}
			// Handshake first, so that the deadline is spent on the fetch.
			if _, err := caller.Unary(context.Background(), server.InstanceID(), "h", nil); err != nil {
				t.Fatal(err)
			}
			<-got
			buf := pattern(tc.size)
			want := bytes.Clone(buf)
			ctx, cancel := context.WithCancel(context.Background())
			if tc.deadline {
				ctx, cancel = context.WithTimeout(context.Background(), time.Second)
			}
			defer cancel()
			waits := rendezvous.LentWaits()
			tap.hold(pullAnswers)
			done := make(chan error, 1)
			go func() {
				_, err := caller.Unary(ctx, server.InstanceID(), "h", buf)
				done <- err
			}()
			tap.waitHeld(t, tc.held)
			if !tc.deadline {
				cancel()
			}
			// The call gave up. Over a transport that retains owners it
			// waits for the transport to finish with the answers it holds;
			// over one that does not, those answers are copies, and it
			// returns at once.
			var err error
			returned := false
			for limit := time.Now().Add(10 * time.Second); !returned && rendezvous.LentWaits() == waits; {
				select {
				case err = <-done:
					returned = true
				case <-time.After(5 * time.Millisecond):
				}
				if time.Now().After(limit) {
					t.Fatal("the call neither returned nor waited for the transport")
				}
			}
			if returned {
				for i := range buf {
					buf[i] = 0xEE // the caller reuses its buffer at once
				}
				if tc.retains {
					t.Errorf("the call returned (%v) while the transport still held the caller's bytes", err)
				}
			} else if !tc.retains {
				t.Errorf("a withdraw waited, though the transport got copies")
			}
			tap.open()
			if !returned {
				err = <-done
				for i := range buf {
					buf[i] = 0xEE
				}
			}
			if tc.deadline && !errors.Is(err, velo.ErrRequestTimeout) || !tc.deadline && !errors.Is(err, context.Canceled) {
				t.Fatalf("the call returned %v", err)
			}
			// The receiver either runs the handler or fails the fetch
			// (WithStagedFailure hears every failed fetch).
			var o outcome
			select {
			case o = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the receiver neither ran the handler nor failed the fetch")
			}
			switch {
			case o.payload != nil && !bytes.Equal(o.payload, want):
				t.Fatalf("the handler saw bytes the caller wrote after its call returned")
			case o.payload != nil && tc.held < 4:
			case o.payload != nil:
				t.Fatal("the handler ran, though chunks past the first window were pulled after the withdraw")
			case o.err != nil && tc.held == 4 && !tc.deadline && !errors.Is(o.err, rendezvous.ErrNotFound):
				t.Fatalf("the fetch failed with %v, want ErrNotFound", o.err)
			}
			if tc.held == 4 && !tc.deadline && refused(cm, "pull", "not_found") < 1 {
				t.Fatal("the owner counted no pull refused as not found")
			}
			waitFor(t, "the caller's slots to be freed", func() bool { b, n := caller.Rendezvous.HeldBytes(); return b == 0 && n == 0 })
		})
	}
}

// TestWithdrawnSlotRefusesLatePulls: a lent slot withdrawn after a
// consumer's acquire refuses the consumer's pulls with the not-found
// error any gone slot gets, and a new acquire too.
func TestWithdrawnSlotRefusesLatePulls(t *testing.T) {
	tap, owner, consumer, om, _ := tappedPair(t, true)
	if err := consumer.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, withdraw := rendezvous.StageLent(owner.Rendezvous, pattern(2*rendezvous.ChunkSize))
	// Hold the acquire's answer: the withdraw comes between it and the pulls.
	tap.hold(func(f ext.Frame) bool {
		return f.Type == ext.Response && bytes.Contains(f.Payload, []byte("transfer_id"))
	})
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, _, err := consumer.Rendezvous.Get(ctx, h)
		done <- result{b, err}
	}()
	tap.waitHeld(t, 1)
	withdraw()
	if b, n := owner.Rendezvous.HeldBytes(); b != 0 || n != 0 {
		t.Fatalf("the owner holds %d bytes in %d slots after the withdraw", b, n)
	}
	tap.open()
	r := <-done
	if !errors.Is(r.err, rendezvous.ErrNotFound) || r.b != nil {
		t.Fatalf("a pull after the withdraw: %d bytes, %v; want ErrNotFound", len(r.b), r.err)
	}
	if !strings.Contains(r.err.Error(), "chunk 0 of transfer") {
		t.Fatalf("the refusal %q does not name the pull", r.err)
	}
	// One pull, or both of the window if the second left before the
	// first refusal was back.
	if n := refused(om, "pull", "not_found"); n < 1 || n > 2 {
		t.Fatalf("%v pulls refused as not found, want 1 or 2", n)
	}
	if _, _, err := consumer.Rendezvous.Get(ctx, h); !errors.Is(err, rendezvous.ErrNotFound) {
		t.Fatalf("an acquire after the withdraw: %v, want ErrNotFound", err)
	}
	if n := refused(om, "acquire", "not_found"); n != 1 {
		t.Fatalf("%v acquires refused as not found, want 1", n)
	}
}
