package rendezvous_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/velo-go/velo/rendezvous"
)

// Gets of a payload past the first buffer (4 MiB) reuse the first buffer
// an earlier one grew out of (given back, spent.go), instead of making a
// new one each time, and each still returns exactly its own payload: ten
// gets allocate their ten payloads and at most one first buffer.
func TestGetReusesFirstBuffers(t *testing.T) {
	consumer, owner, _, _ := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const size, gets = 6 << 20, 10
	// A buffer that an earlier test gave back could hold a whole payload.
	rendezvous.DropSpent()
	before := rendezvous.FetchAllocBytes()
	for i := range gets {
		data := pattern(size)
		data[i] ^= 0xff // each get a different payload: a stale byte would show
		h := owner.Rendezvous.RegisterData(data)
		got, lease, err := consumer.Rendezvous.Get(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("get %d: the payload differs from the one staged", i)
		}
		if err := consumer.Rendezvous.Release(ctx, h, lease); err != nil {
			t.Fatal(err)
		}
	}
	const first = 4 << 20
	allocated := rendezvous.FetchAllocBytes() - before
	if allocated > gets*size+first {
		t.Fatalf("%d bytes of buffers for %d gets of %d: more than one first buffer", allocated, gets, size)
	}
	if allocated < gets*size {
		t.Fatalf("%d bytes of buffers for %d gets of %d: fewer than the payloads", allocated, gets, size)
	}
	t.Logf("%d MiB of buffers for %d gets of %d MiB", allocated>>20, gets, size>>20)
}
