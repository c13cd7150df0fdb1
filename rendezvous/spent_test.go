package rendezvous_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/rendezvous"
)

// seeded is a payload of n bytes that starts with seed and differs from
// every other seed's payload at every byte.
func seeded(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>9) ^ seed
	}
	return b
}

// A staged call's fetched payload goes back once its handler returned, and
// the next staged call of that size is fetched into it: a run of calls
// allocates no destination after the first. Each handler
// sees its own call's bytes only: a given-back buffer holding the last
// call's payload shows none of it.
func TestStagedCallsFetchIntoGivenBackPayloads(t *testing.T) {
	caller, server, _, _ := pair(t)
	const n, calls = 6<<20 + 7, 16
	if err := server.Register(velo.UnaryHandler("check", func(c *velo.Context) ([]byte, error) {
		if len(c.Payload) != n || !bytes.Equal(c.Payload, seeded(n, c.Payload[0])) {
			return nil, errors.New("the handler saw bytes that are not its call's")
		}
		return []byte("ok"), nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := func(seed byte) {
		t.Helper()
		if _, err := caller.Unary(ctx, server.InstanceID(), "check", seeded(n, seed)); err != nil {
			t.Fatalf("call %d: %v", seed, err)
		}
	}
	call(0)
	a0, g0, t0 := rendezvous.FetchAllocs(), rendezvous.SpentGiven(), rendezvous.SpentTaken()
	for i := 1; i <= calls; i++ {
		call(byte(i))
	}
	allocs, given, taken := rendezvous.FetchAllocs()-a0, rendezvous.SpentGiven()-g0, rendezvous.SpentTaken()-t0
	t.Logf("%d calls: %d destinations allocated, %d payloads given back, %d taken", calls, allocs, given, taken)
	if given != calls {
		t.Fatalf("%d of %d fetched payloads were given back", given, calls)
	}
	// One slack each: two collections between a handler's return and the
	// next fetch let its buffer go.
	if taken < calls-1 || allocs > 2 {
		t.Fatalf("%d of %d fetches took a given-back payload and %d destinations were allocated, want every fetch but one and at most 2", taken, calls, allocs)
	}
}

// An answer that shares its request's memory (an echo) is written after
// the handler returned, so that payload is not given back, and every echo
// comes back whole although more calls follow at once.
func TestEchoedPayloadIsNotGivenBack(t *testing.T) {
	caller, server, _, _ := pair(t)
	if err := server.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return c.Payload[1:], nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g0 := rendezvous.SpentGiven()
	for i := range 4 {
		p := seeded(2<<20+3, byte(i))
		got, err := caller.Unary(ctx, server.InstanceID(), "echo", p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, p[1:]) {
			t.Fatalf("echo %d came back changed", i)
		}
	}
	if g := rendezvous.SpentGiven() - g0; g != 0 {
		t.Fatalf("%d echoed payloads were given back", g)
	}
}

// A given-back buffer full of other bytes shows none of them: gets of an
// all-zero payload into buffers given back full of 0xee return zeros only,
// at sizes of one chunk, of many and of a short last chunk.
func TestGivenBackBufferHoldsOnlyThePayload(t *testing.T) {
	consumer, owner, _, _ := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, size := range []int{1<<20 + 5, 9 << 20, 9<<20 + 12345} {
		h := owner.Rendezvous.RegisterData(make([]byte, size))
		var got []byte
		for try := 0; ; try++ {
			consumer.Rendezvous.Recycle(bytes.Repeat([]byte{0xee}, size+size/3))
			t0 := rendezvous.SpentTaken()
			b, lease, err := consumer.Rendezvous.Get(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if err := consumer.Rendezvous.Detach(ctx, h, lease); err != nil {
				t.Fatal(err)
			}
			if rendezvous.SpentTaken() > t0 {
				got = b
				break
			}
			if try == 20 {
				t.Fatalf("%d-byte get: twenty gets took no given-back buffer", size)
			}
		}
		if len(got) != size || cap(got) != size {
			t.Fatalf("got len %d cap %d, want %d", len(got), cap(got), size)
		}
		if i := bytes.IndexByte(got, 0xee); i >= 0 {
			t.Fatalf("%d-byte get: a stale byte at %d", size, i)
		}
	}
}

// A given-back payload that no fetch takes is let go by collections (the
// second after it was given back, once its cleanup ran), and a class keeps
// at most four.
func TestGivenBackPayloadsGoWithCollections(t *testing.T) {
	consumer, _, _, _ := pair(t)
	rendezvous.DropSpent() // SpentHeld counts every class
	for range 6 {
		consumer.Rendezvous.Recycle(make([]byte, 3<<20))
	}
	if n := rendezvous.SpentHeld(); n > 4 {
		t.Fatalf("%d given-back payloads of one class kept, want at most 4", n)
	}
	for gcs := 0; rendezvous.SpentHeld() > 0; gcs++ {
		if gcs == 100 {
			t.Fatalf("%d given-back payloads still kept after 100 collections", rendezvous.SpentHeld())
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// Copies per byte: a staged call fetched into a given-back payload reads
// every chunk from the socket straight into its place and copies nothing
// in this process (no first buffer to grow out of); a get into a new
// buffer copies its first buffer once when it grows: 4 MiB of a 64 MiB
// payload, or up to 8 when a given-back buffer of that class served.
func TestCopiesPerFetchedByte(t *testing.T) {
	caller, server, _, _ := pair(t)
	const n, calls = 6 << 20, 8
	if err := server.Register(velo.UnaryHandler("sink", func(c *velo.Context) ([]byte, error) {
		return []byte{byte(len(c.Payload))}, nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := seeded(n, 1)
	if _, err := caller.Unary(ctx, server.InstanceID(), "sink", p); err != nil {
		t.Fatal(err)
	}
	d0, g0 := rendezvous.DirectChunks(), rendezvous.GrownBytes()
	for range calls {
		if _, err := caller.Unary(ctx, server.InstanceID(), "sink", p); err != nil {
			t.Fatal(err)
		}
	}
	direct, grown := rendezvous.DirectChunks()-d0, rendezvous.GrownBytes()-g0
	t.Logf("%d staged calls of %d bytes: %d chunks read in place, %d bytes copied growing", calls, n, direct, grown)
	if want := int64(calls * n / rendezvous.ChunkSize); direct != want {
		t.Fatalf("%d of %d chunks read straight into their place", direct, want)
	}
	// One slack: two collections between a handler's return and the next
	// fetch let its buffer go, and that fetch grows a new one.
	if grown > 4<<20 {
		t.Fatalf("%d bytes copied growing destinations over %d calls, want at most one first buffer (4 MiB)", grown, calls)
	}

	h := server.Rendezvous.RegisterData(pattern(64 << 20))
	g0 = rendezvous.GrownBytes()
	got, lease, err := caller.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(got, pattern(64<<20)) {
		t.Fatalf("get: %v", err)
	}
	if err := caller.Rendezvous.Release(ctx, h, lease); err != nil {
		t.Fatal(err)
	}
	if g := rendezvous.GrownBytes() - g0; g > 8<<20 {
		t.Fatalf("a 64 MiB get copied %d bytes growing, want at most its first buffer (4 to 8 MiB)", g)
	}
}
