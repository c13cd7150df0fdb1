package rendezvous_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/transport/tcp"
)

// Tests as a hostile peer meets the rendezvous: a stranger that guesses
// ids, a peer that names another's lease or transfer, and an owner that
// states more bytes than it sends.

// refused reads velo_rendezvous_refusals_total{operation, reason}.
func refused(reg *prometheus.Registry, op, reason string) float64 {
	return valueOf(reg, "velo_rendezvous_refusals_total", map[string]string{"operation": op, "reason": reason})
}

// trio is an owner and two real nodes that know it: a consumer a, and b,
// which is never given a handle.
func trio(t *testing.T) (owner, a, b *velo.Node, om *prometheus.Registry) {
	t.Helper()
	owner, om = newNode(t)
	a, _ = newNode(t)
	b, _ = newNode(t)
	for _, c := range []*velo.Node{a, b} {
		if err := c.RegisterPeer(owner.PeerInfo()); err != nil {
			t.Fatal(err)
		}
		if err := owner.RegisterPeer(c.PeerInfo()); err != nil {
			t.Fatal(err)
		}
		if err := msgrx.Handshake(c.Messenger(), context.Background(), owner.InstanceID()); err != nil {
			t.Fatal(err)
		}
	}
	return owner, a, b, om
}

// TestStrangerCannotGuessAHandle: slot ids are random, so a peer that was
// never given a handle finds nothing at the first thousand guesses near
// the ids a counter would have used, nor next to a handle it was given;
// each miss is refused as not found, and counted. With the counter,
// guess lo = 1 was another request's payload.
func TestStrangerCannotGuessAHandle(t *testing.T) {
	owner, _, b, om := trio(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secret := owner.Rendezvous.RegisterData([]byte("another request's payload"))
	given := owner.Rendezvous.RegisterData([]byte("b's own"))
	guesses := []uint64{given.Lo - 1, given.Lo + 1, secret.Lo ^ 1}
	for lo := uint64(1); lo <= 1000; lo++ {
		guesses = append(guesses, lo)
	}
	for _, lo := range guesses {
		if lo == secret.Lo || lo == given.Lo {
			t.Fatalf("a guess hit a staged slot id %d", lo)
		}
		h := rendezvous.DataHandle{Hi: uint64(owner.WorkerID()), Lo: lo}
		if _, err := b.Rendezvous.Metadata(ctx, h); !errors.Is(err, rendezvous.ErrNotFound) {
			t.Fatalf("metadata of guess %d: %v, want ErrNotFound", lo, err)
		}
	}
	if _, _, err := b.Rendezvous.Get(ctx, rendezvous.DataHandle{Hi: uint64(owner.WorkerID()), Lo: 1}); !errors.Is(err, rendezvous.ErrNotFound) {
		t.Fatalf("get of guess 1: %v, want ErrNotFound", err)
	}
	if got := refused(om, "metadata", "not_found"); got != float64(len(guesses)) {
		t.Fatalf("%v metadata refusals counted, want %d", got, len(guesses))
	}
	if got := refused(om, "acquire", "not_found"); got != 1 {
		t.Fatalf("%v acquire refusals counted, want 1", got)
	}
	// A handle is a capability: b, once given one, may read it.
	if got, lease, err := b.Rendezvous.Get(ctx, given); err != nil || string(got) != "b's own" {
		t.Fatalf("get of a given handle: %q %v", got, err)
	} else if err := b.Rendezvous.Release(ctx, given, lease); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseAndTransferBelongToTheirHolder: b learns a's lease and transfer
// ids (here from the owner's table; on the wire it could only guess 64
// random bits) and names them from its own node. The owner refuses b's
// pull with ErrNotHolder and ignores b's renew, detach and release, each
// counted as not_holder; a's transfer and lease go on, and the owner's
// own code cannot end a's lease either. Without the check, b read the
// chunk and its release ended a's lease and freed the slot.
func TestLeaseAndTransferBelongToTheirHolder(t *testing.T) {
	owner, a, b, om := trio(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const size = 2*rendezvous.ChunkSize + 5
	h := owner.Rendezvous.RegisterData(pattern(size))
	got, lease, err := a.Rendezvous.Get(ctx, h)
	if err != nil || len(got) != size {
		t.Fatalf("a's get: %d bytes, %v", len(got), err)
	}
	transfer, holder, ok := rendezvous.LeaseOf(owner.Rendezvous, lease)
	if !ok || holder != a.WorkerID() {
		t.Fatalf("lease %d: holder %d (ok %v), want a (%d)", lease, holder, ok, a.WorkerID())
	}
	pull, _ := json.Marshal(map[string]any{"transfer_id": transfer, "chunk_index": 0})
	_, err = b.Messenger().Unary(ctx, owner.InstanceID(), rendezvous.HandlerPull, pull)
	if !errors.Is(rendezvous.FromRemote(err), rendezvous.ErrNotHolder) {
		t.Fatalf("b's pull of a's transfer: %v, want ErrNotHolder", err)
	}
	if got := refused(om, "pull", "not_holder"); got != 1 {
		t.Fatalf("%v pull refusals counted, want 1", got)
	}
	end, _ := json.Marshal(map[string]any{"handle": h, "lease_id": lease})
	for _, hd := range []string{rendezvous.HandlerLeaseRenew, rendezvous.HandlerDetach, rendezvous.HandlerRelease} {
		if err := b.Messenger().Send(ctx, owner.InstanceID(), hd, end); err != nil {
			t.Fatal(err)
		}
	}
	for _, op := range []string{"renew", "detach", "release"} {
		waitFor(t, "the owner to refuse b's "+op, func() bool { return refused(om, op, "not_holder") == 1 })
	}
	if err := owner.Rendezvous.Release(ctx, h, lease); !errors.Is(err, rendezvous.ErrNotHolder) {
		t.Fatalf("the owner's own release of a's lease: %v, want ErrNotHolder", err)
	}
	if _, _, ok := rendezvous.LeaseOf(owner.Rendezvous, lease); !ok {
		t.Fatal("a's lease was ended by another peer")
	}
	if md, err := a.Rendezvous.Metadata(ctx, h); err != nil || md.Refcount != 1 {
		t.Fatalf("refcount after b's releases: %+v %v", md, err)
	}
	// a's transfer still serves a.
	chunk, err := a.Messenger().Unary(ctx, owner.InstanceID(), rendezvous.HandlerPull, pull)
	if err != nil || len(chunk) != rendezvous.ChunkSize {
		t.Fatalf("a's pull of its own transfer: %d bytes, %v", len(chunk), err)
	}
	if err := a.Rendezvous.Release(ctx, h, lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's release to free the slot", func() bool { b, n := owner.Rendezvous.HeldBytes(); return b == 0 && n == 0 })
}

// liar is a bare messenger that answers _rv_acquire for one handle with a
// size it then does not send: the first honest pulls get a full chunk,
// every later one ten bytes.
type liar struct {
	m      *messenger.Messenger
	stated uint64
	honest uint32
	ended  chan string // the handler of each detach or release it got
}

func newLiar(t *testing.T, stated uint64) *liar { return newHonestLiar(t, stated, 0) }

func newHonestLiar(t *testing.T, stated uint64, honest uint32) *liar {
	t.Helper()
	m := bareMessenger(t)
	l := &liar{m: m, stated: stated, honest: honest, ended: make(chan string, 8)}
	full := make([]byte, rendezvous.ChunkSize)
	const chunk = rendezvous.ChunkSize
	hs := []messenger.Handler{
		messenger.UnaryHandler(rendezvous.HandlerAcquire, func(*messenger.Context) ([]byte, error) {
			return json.Marshal(map[string]any{"Ready": map[string]any{
				"lease_id": 1, "transfer_id": 1, "total_len": l.stated,
				"chunk_size": chunk, "chunk_count": (l.stated + chunk - 1) / chunk,
			}})
		}),
		messenger.UnaryHandler(rendezvous.HandlerPull, func(c *messenger.Context) ([]byte, error) {
			var req struct {
				ChunkIndex uint32 `json:"chunk_index"`
			}
			if err := json.Unmarshal(c.Payload, &req); err == nil && req.ChunkIndex < l.honest {
				return full, nil
			}
			return []byte("ten bytes!"), nil
		}),
		messenger.FireHandler(rendezvous.HandlerDetach, func(*messenger.Context) { l.ended <- rendezvous.HandlerDetach }),
		messenger.FireHandler(rendezvous.HandlerRelease, func(*messenger.Context) { l.ended <- rendezvous.HandlerRelease }),
	}
	for _, h := range hs {
		if err := msgrx.RegisterSystem(m, h); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l *liar) handle() rendezvous.DataHandle {
	return rendezvous.DataHandle{Hi: uint64(l.m.WorkerID()), Lo: 1}
}

// meet registers the liar and n with each other.
func (l *liar) meet(t *testing.T, n *velo.Node) {
	t.Helper()
	if err := n.RegisterPeer(l.m.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := l.m.RegisterPeer(n.PeerInfo()); err != nil {
		t.Fatal(err)
	}
}

// allocated runs f and returns what it allocated: bytes of fetch buffers
// (the seam) and bytes of heap in all (runtime.MemStats.TotalAlloc, which
// counts every allocation of the process, so it is a loose bound).
func allocated(f func()) (buffers, heap int64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b := rendezvous.FetchAllocBytes()
	f()
	buffers = rendezvous.FetchAllocBytes() - b
	runtime.ReadMemStats(&after)
	return buffers, int64(after.TotalAlloc - before.TotalAlloc)
}

// TestLyingOwnerCostsWhatItSends: an owner states 1 TiB (or just under
// the default limit) and sends ten bytes, or three honest chunks (1.5
// MiB) and then ten bytes. The fetch fails with ErrSizeMismatch, counted
// as size_mismatch, the lease is detached, and the puller allocated
// nothing for ten bytes and under 8 MiB (the first buffer, 4 MiB, and the
// chunks in flight) for the honest chunks, not the stated size. Before,
// the stated size was allocated first: 1 TiB killed the node (fatal
// error: runtime: out of memory).
func TestLyingOwnerCostsWhatItSends(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stated  uint64
		honest  uint32
		fetch   bool  // Fetch (transparent, default limit) rather than Get
		buffers int64 // the most the fetch buffers may take
	}{
		{"get 1 TiB", 1 << 40, 0, false, 0},
		{"fetch under the default limit", rendezvous.DefaultPayloadMax - 1, 0, true, 0},
		{"fetch, three chunks then short", rendezvous.DefaultPayloadMax - 1, 3, true, 8 << 20},
		{"get 1 TiB, three chunks then short", 1 << 40, 3, false, 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, reg := newNode(t)
			l := newHonestLiar(t, tc.stated, tc.honest)
			l.meet(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			buffers, heap := allocated(func() {
				if tc.fetch {
					_, err = n.Rendezvous.Fetch(ctx, l.handle().String(), false)
				} else {
					_, _, err = n.Rendezvous.Get(ctx, l.handle())
				}
			})
			if !errors.Is(err, rendezvous.ErrSizeMismatch) || !strings.Contains(err.Error(), "has 10 bytes") {
				t.Fatalf("err = %v, want ErrSizeMismatch naming the 10 bytes", err)
			}
			t.Logf("stated %d bytes, %d honest chunks: fetch buffers %d bytes, heap %d bytes", tc.stated, tc.honest, buffers, heap)
			if buffers > tc.buffers {
				t.Fatalf("fetch buffers of %d bytes for %d honest chunks, want at most %d", buffers, tc.honest, tc.buffers)
			}
			if heap > 64<<20 {
				t.Fatalf("the heap took %d bytes during a fetch that got 10", heap)
			}
			if got := refused(reg, "get", "size_mismatch"); got != 1 {
				t.Fatalf("%v size_mismatch refusals, want 1", got)
			}
			select {
			case hd := <-l.ended:
				if hd != rendezvous.HandlerDetach {
					t.Fatalf("the lease ended by %s, want a detach", hd)
				}
			case <-ctx.Done():
				t.Fatal("the lease of a failed fetch was never detached")
			}
		})
	}
}

// TestDefaultPayloadMax: a node built with defaults takes at most 1 GiB
// by transparent staging. A stated 1 TiB is refused before any buffer
// exists and the handle released; WithStagedPayloadMax(-1) lifts the
// limit (the growth rule still holds).
func TestDefaultPayloadMax(t *testing.T) {
	n, reg := newNode(t)
	if got := n.Rendezvous.PayloadMax(); got != 1<<30 {
		t.Fatalf("default PayloadMax %d, want 1 GiB", got)
	}
	l := newLiar(t, 1<<40)
	l.meet(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	allocs := rendezvous.FetchAllocs()
	_, err := n.Rendezvous.Fetch(ctx, l.handle().String(), false)
	if !errors.Is(err, rendezvous.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "1099511627776") || !strings.Contains(err.Error(), "1073741824") {
		t.Fatalf("err = %v, want ErrPayloadTooLarge naming both sizes", err)
	}
	if got := rendezvous.FetchAllocs(); got != allocs {
		t.Fatalf("%d buffers allocated for a refused payload", got-allocs)
	}
	if got := refused(reg, "get", "too_large"); got != 1 {
		t.Fatalf("%v too_large refusals, want 1", got)
	}
	if hd := <-l.ended; hd != rendezvous.HandlerRelease {
		t.Fatalf("the refused handle ended by %s, want a release", hd)
	}
	open, _ := newNode(t, velo.WithStagedPayloadMax(-1))
	if got := open.Rendezvous.PayloadMax(); got != -1 {
		t.Fatalf("PayloadMax %d with no limit, want -1", got)
	}
	l.meet(t, open)
	if _, err := open.Rendezvous.Fetch(ctx, l.handle().String(), false); !errors.Is(err, rendezvous.ErrSizeMismatch) {
		t.Fatalf("with no limit: %v, want ErrSizeMismatch", err)
	}
}

// lyingStager stages nothing: every payload goes out as the liar's handle.
type lyingStager struct{ handle string }

func (s lyingStager) Threshold() int                              { return 0 }
func (s lyingStager) Stage([]byte, time.Duration) (string, error) { return s.handle, nil }
func (s lyingStager) Discard(string)                              {}
func (s lyingStager) FetchTimeout() time.Duration                 { return 0 }
func (s lyingStager) Fetch(context.Context, string, bool) ([]byte, error) {
	return nil, errors.New("not used")
}

// TestTransparentFetchFromALiar: the messenger's transparent staging, as
// a hostile sender meets it. The sender's request names a handle whose
// owner (the sender) states just under 1 GiB and sends ten bytes; the
// receiver's fetch allocates no buffer, fails, answers the caller
// with the reason, and never runs the handler.
func TestTransparentFetchFromALiar(t *testing.T) {
	victim, reg := newNode(t)
	l := newLiar(t, rendezvous.DefaultPayloadMax-1)
	l.meet(t, victim)
	msgrx.SetStager(l.m, lyingStager{l.handle().String()})
	ran := make(chan struct{}, 1)
	if err := victim.Register(velo.UnaryHandler("h", func(*velo.Context) ([]byte, error) { ran <- struct{}{}; return nil, nil })); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	buffers, heap := allocated(func() { _, err = l.m.Unary(ctx, victim.InstanceID(), "h", []byte("x")) })
	if err == nil || !strings.Contains(err.Error(), rendezvous.ErrSizeMismatch.Error()) {
		t.Fatalf("err = %v, want the receiver's size mismatch", err)
	}
	if buffers > 0 || heap > 64<<20 {
		t.Fatalf("the receiver allocated %d bytes of buffers (%d in all) for 10 bytes received", buffers, heap)
	}
	if got := refused(reg, "get", "size_mismatch"); got != 1 {
		t.Fatalf("%v size_mismatch refusals, want 1", got)
	}
	if got := valueOf(reg, "velo_messenger_dispatch_failures_total", map[string]string{"stage": "dispatch", "reason": "staged_fetch"}); got != 1 {
		t.Fatalf("%v staged_fetch failures, want 1", got)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran on a payload that never arrived")
	default:
	}
}

// bareMessenger is a messenger over TCP with no rendezvous manager, for a
// peer that speaks the rendezvous protocol by hand; it shuts down at
// cleanup.
func bareMessenger(t *testing.T) *messenger.Messenger {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := messenger.New(context.Background(), messenger.Config{Transports: []ext.Transport{tr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}
