package rendezvous_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/velo-go/velo/rendezvous"
)

// A fetch destination is not cleared: memory that held other bytes comes
// back holding them. After a GC the runtime hands a freed span of the
// same size back nearly every time (45 of 50 in a plain run, all under
// -race), so of twenty tries at least one must show a stale byte; a
// destination made with make (cleared) never does.
func TestDestinationIsNotCleared(t *testing.T) {
	if !rendezvous.UnclearedDestinations {
		t.Skip("this Go release clears destinations (nozero_other.go)")
	}
	const n = 8 << 20
	for range 20 {
		poison := make([]byte, n)
		for i := range poison {
			poison[i] = 0xee
		}
		runtime.KeepAlive(poison)
		poison = nil
		runtime.GC()
		d := rendezvous.AllocDest(n)
		if len(d) != 0 || cap(d) != n {
			t.Fatalf("allocDest(%d): len %d cap %d", n, len(d), cap(d))
		}
		if d[:n][n/2] == 0xee {
			return
		}
	}
	t.Fatal("twenty destinations after a freed poisoned span were all clear: allocDest clears its memory")
}

// No stale byte of an uncleared destination reaches a caller: gets of an
// all-zero payload, into memory freed full of 0xee just before, return
// zeros only, at sizes that take the first buffer alone, the grown
// buffer, and a last chunk shorter than the others.
func TestUnclearedDestinationHoldsOnlyThePayload(t *testing.T) {
	consumer, owner, _, _ := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, size := range []int{3 << 20, 9 << 20, 9<<20 + 12345} {
		for range 3 {
			poison := bytes.Repeat([]byte{0xee}, 16<<20)
			runtime.KeepAlive(poison)
			poison = nil
			runtime.GC()
			h := owner.Rendezvous.RegisterData(make([]byte, size))
			got, lease, err := consumer.Rendezvous.Get(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != size {
				t.Fatalf("got %d bytes, want %d", len(got), size)
			}
			if i := bytes.IndexFunc(got, func(r rune) bool { return r != 0 }); i >= 0 {
				t.Fatalf("%d-byte get: a stale byte at %d", size, i)
			}
			if err := consumer.Rendezvous.Release(ctx, h, lease); err != nil {
				t.Fatal(err)
			}
		}
	}
}
