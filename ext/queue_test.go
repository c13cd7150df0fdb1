package ext_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/velo-go/velo/ext"
)

func mustPopAll[T any](t *testing.T, q *ext.Queue[T], dst []T) []T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	out, err := q.PopAll(ctx, dst)
	if err != nil {
		t.Fatalf("PopAll: %v", err)
	}
	return out
}

func TestQueuePopAllReturnsEverythingInOrder(t *testing.T) {
	q := ext.NewQueue[int](100)
	for i := 1; i <= 5; i++ {
		if err := q.Push(i); err != nil {
			t.Fatal(err)
		}
	}
	if q.Len() != 5 {
		t.Fatalf("Len = %d, want 5", q.Len())
	}
	got := mustPopAll(t, q, nil)
	if !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("PopAll = %v", got)
	}
	if q.Len() != 0 {
		t.Fatalf("Len after PopAll = %d", q.Len())
	}

	// A non-empty dst is appended to.
	for i := 6; i <= 8; i++ {
		_ = q.Push(i)
	}
	got = mustPopAll(t, q, []int{99})
	if !slices.Equal(got, []int{99, 6, 7, 8}) {
		t.Fatalf("PopAll onto [99] = %v", got)
	}
	// And what was queued next is still only the new items.
	_ = q.Push(9)
	if got := mustPopAll(t, q, nil); !slices.Equal(got, []int{9}) {
		t.Fatalf("PopAll after append path = %v", got)
	}
}

// PopAll swaps the consumer's spare slice in. A batch that the consumer still
// holds must not change when producers push after it was returned.
func TestQueuePopAllReusesSpareBatchSafely(t *testing.T) {
	q := ext.NewQueue[int](100)
	_ = q.Push(1)
	_ = q.Push(2)
	b1 := mustPopAll(t, q, nil)
	_ = q.Push(3)
	_ = q.Push(4)
	if !slices.Equal(b1, []int{1, 2}) {
		t.Fatalf("first batch changed under later pushes: %v", b1)
	}
	b2 := mustPopAll(t, q, b1[:0]) // b1 given back as spare
	_ = q.Push(5)
	_ = q.Push(6)
	_ = q.Push(7)
	if !slices.Equal(b2, []int{3, 4}) {
		t.Fatalf("second batch changed under later pushes: %v", b2)
	}
	b3 := mustPopAll(t, q, b2[:0])
	if !slices.Equal(b3, []int{5, 6, 7}) {
		t.Fatalf("third batch = %v", b3)
	}
	// Many rounds keep order and never mix batches.
	next, batch := 8, b3
	for round := 0; round < 100; round++ {
		n := round%7 + 1
		for i := 0; i < n; i++ {
			_ = q.Push(next + i)
		}
		batch = mustPopAll(t, q, batch[:0])
		if len(batch) != n {
			t.Fatalf("round %d: %d items, want %d", round, len(batch), n)
		}
		for i, v := range batch {
			if v != next+i {
				t.Fatalf("round %d: batch %v, want from %d", round, batch, next)
			}
		}
		next += n
	}
}

func TestQueuePopIsFIFO(t *testing.T) {
	q := ext.NewQueue[string](10)
	for _, s := range []string{"a", "b", "c"} {
		_ = q.Push(s)
	}
	ctx := context.Background()
	for _, want := range []string{"a", "b"} {
		got, err := q.Pop(ctx)
		if err != nil || got != want {
			t.Fatalf("Pop = %q, %v; want %q", got, err, want)
		}
	}
	_ = q.Push("d")
	if got := mustPopAll(t, q, nil); !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("PopAll after Pop = %v", got)
	}
	_ = q.Push("e")
	if got, err := q.Pop(ctx); err != nil || got != "e" {
		t.Fatalf("Pop = %q, %v", got, err)
	}
}

// A full queue parks Push until a consumer frees room. The test waits until
// the producer is provably parked (the queue's own signal), checks it has not
// returned, and only then frees room.
func TestQueuePushBlocksWhenFullUntilPopAll(t *testing.T) {
	q := ext.NewQueue[int](2)
	_ = q.Push(1)
	_ = q.Push(2)

	pushed := make(chan error, 1)
	go func() { pushed <- q.Push(3) }()

	waitUntil(t, "the producer parks on the full queue", q.ProducerWaiting)
	if closedNow(pushed) {
		t.Fatal("Push returned while the queue was full")
	}
	if q.Len() != 2 {
		t.Fatalf("Len = %d with a full queue of 2", q.Len())
	}

	if got := mustPopAll(t, q, nil); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("PopAll = %v", got)
	}
	if err := recv(t, "the parked Push", pushed); err != nil {
		t.Fatalf("parked Push: %v", err)
	}
	if got := mustPopAll(t, q, nil); !slices.Equal(got, []int{3}) {
		t.Fatalf("PopAll = %v, want the parked item", got)
	}
}

func TestQueuePushBlocksWhenFullUntilPop(t *testing.T) {
	q := ext.NewQueue[int](1)
	_ = q.Push(1)
	pushed := make(chan error, 1)
	go func() { pushed <- q.Push(2) }()
	waitUntil(t, "the producer parks", q.ProducerWaiting)
	if closedNow(pushed) {
		t.Fatal("Push returned while the queue was full")
	}
	if v, err := q.Pop(context.Background()); err != nil || v != 1 {
		t.Fatalf("Pop = %d, %v", v, err)
	}
	if err := recv(t, "the parked Push", pushed); err != nil {
		t.Fatal(err)
	}
	if v, err := q.Pop(context.Background()); err != nil || v != 2 {
		t.Fatalf("Pop = %d, %v", v, err)
	}
}

// One PopAll frees room for every parked producer that fits.
func TestQueuePopAllWakesAllParkedProducers(t *testing.T) {
	const capacity = 4
	q := ext.NewQueue[int](capacity)
	for i := 0; i < capacity; i++ {
		_ = q.Push(i)
	}
	var wg sync.WaitGroup
	errs := make(chan error, capacity)
	for i := 0; i < capacity; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- q.Push(100 + i)
		}()
	}
	waitUntil(t, "a producer parks", q.ProducerWaiting)
	got := mustPopAll(t, q, nil)
	if !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("PopAll = %v", got)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got = mustPopAll(t, q, nil)
	slices.Sort(got)
	if !slices.Equal(got, []int{100, 101, 102, 103}) {
		t.Fatalf("second PopAll = %v", got)
	}
}

func TestQueueCapacityAtLeastOne(t *testing.T) {
	for _, c := range []int{0, -5} {
		q := ext.NewQueue[int](c)
		if err := q.Push(1); err != nil {
			t.Fatalf("NewQueue(%d): Push: %v", c, err)
		}
		pushed := make(chan error, 1)
		go func() { pushed <- q.Push(2) }()
		waitUntil(t, "the second Push parks", q.ProducerWaiting)
		if q.Len() != 1 {
			t.Fatalf("NewQueue(%d): Len = %d, want capacity 1", c, q.Len())
		}
		_ = mustPopAll(t, q, nil)
		if err := recv(t, "Push", pushed); err != nil {
			t.Fatal(err)
		}
	}
}

func TestQueueCloseWakesWaitingConsumers(t *testing.T) {
	q := ext.NewQueue[int](4)
	const consumers = 3
	errs := make(chan error, consumers+1)
	for i := 0; i < consumers; i++ {
		go func() {
			_, err := q.PopAll(context.Background(), nil)
			errs <- err
		}()
	}
	go func() {
		_, err := q.Pop(context.Background())
		errs <- err
	}()
	waitUntil(t, "a consumer parks", q.ConsumerWaiting)
	q.Close(nil)
	for i := 0; i < consumers+1; i++ {
		if err := recv(t, "a woken consumer", errs); !errors.Is(err, ext.ErrQueueClosed) {
			t.Fatalf("consumer after Close: %v, want ErrQueueClosed", err)
		}
	}
}

func TestQueueCloseWakesProducersAndDropsLeftovers(t *testing.T) {
	q := ext.NewQueue[int](3)
	for i := 1; i <= 3; i++ {
		_ = q.Push(i)
	}
	const producers = 2
	errs := make(chan error, producers)
	for i := 0; i < producers; i++ {
		go func() { errs <- q.Push(100 + i) }()
	}
	waitUntil(t, "a producer parks", q.ProducerWaiting)

	var dropped []int
	q.Close(func(v int) { dropped = append(dropped, v) })
	if !slices.Equal(dropped, []int{1, 2, 3}) {
		t.Fatalf("dropped %v, want the queued items in order", dropped)
	}
	for i := 0; i < producers; i++ {
		if err := recv(t, "a woken producer", errs); !errors.Is(err, ext.ErrQueueClosed) {
			t.Fatalf("producer after Close: %v, want ErrQueueClosed", err)
		}
	}
	// The producers' items were not added: nothing more to drop, nothing to pop.
	if q.Len() != 0 {
		t.Fatalf("Len after Close = %d", q.Len())
	}
	if _, err := q.PopAll(context.Background(), nil); !errors.Is(err, ext.ErrQueueClosed) {
		t.Fatalf("PopAll after Close: %v", err)
	}
	if _, err := q.Pop(context.Background()); !errors.Is(err, ext.ErrQueueClosed) {
		t.Fatalf("Pop after Close: %v", err)
	}
	if err := q.Push(7); !errors.Is(err, ext.ErrQueueClosed) {
		t.Fatalf("Push after Close: %v", err)
	}
	// Close is idempotent and does not drop twice.
	q.Close(func(v int) { t.Fatalf("second Close dropped %d", v) })
}

func TestQueueCloseWithNilDrop(t *testing.T) {
	q := ext.NewQueue[int](3)
	_ = q.Push(1)
	q.Close(nil)
	if err := q.Push(2); !errors.Is(err, ext.ErrQueueClosed) {
		t.Fatalf("Push after Close: %v", err)
	}
}

func TestQueuePopAllHonoursContext(t *testing.T) {
	q := ext.NewQueue[int](4)
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		out []int
		err error
	}
	done := make(chan result, 1)
	spare := make([]int, 0, 8)
	go func() {
		out, err := q.PopAll(ctx, spare)
		done <- result{out, err}
	}()
	waitUntil(t, "the consumer parks", q.ConsumerWaiting)
	if closedNow(done) {
		t.Fatal("PopAll returned on an empty queue")
	}
	cancel()
	r := recv(t, "the cancelled PopAll", done)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("PopAll after cancel: %v", r.err)
	}
	if len(r.out) != 0 {
		t.Fatalf("PopAll after cancel returned %v", r.out)
	}

	// A deadline too.
	dctx, dcancel := context.WithTimeout(context.Background(), 0)
	defer dcancel()
	if _, err := q.PopAll(dctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PopAll with an expired deadline: %v", err)
	}
	if _, err := q.Pop(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Pop with an expired deadline: %v", err)
	}

	// The queue still works after a consumer gave up.
	_ = q.Push(42)
	if got := mustPopAll(t, q, nil); !slices.Equal(got, []int{42}) {
		t.Fatalf("PopAll after a cancelled wait = %v", got)
	}
}

func TestQueuePopHonoursContext(t *testing.T) {
	q := ext.NewQueue[int](4)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := q.Pop(ctx)
		errc <- err
	}()
	waitUntil(t, "the consumer parks", q.ConsumerWaiting)
	cancel()
	if err := recv(t, "the cancelled Pop", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pop after cancel: %v", err)
	}
}

// A parked consumer wakes for the first Push.
func TestQueuePushWakesParkedConsumer(t *testing.T) {
	q := ext.NewQueue[int](4)
	got := make(chan []int, 1)
	go func() {
		out, err := q.PopAll(context.Background(), nil)
		if err != nil {
			out = nil
		}
		got <- out
	}()
	waitUntil(t, "the consumer parks", q.ConsumerWaiting)
	_ = q.Push(5)
	if out := recv(t, "the woken consumer", got); len(out) == 0 || out[0] != 5 {
		t.Fatalf("woken consumer got %v", out)
	}
}

// Many producers, one batching consumer, under -race: nothing lost or
// duplicated, each producer's items in its own order, and no batch larger
// than the capacity.
func TestQueueManyProducersOneConsumer(t *testing.T) {
	const (
		producers = 8
		perProd   = 2000
		capacity  = 16
	)
	type item struct{ p, seq int }
	q := ext.NewQueue[item](capacity)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := 0; s < perProd; s++ {
				if err := q.Push(item{p, s}); err != nil {
					t.Errorf("Push: %v", err)
					return
				}
			}
		}()
	}
	next := make([]int, producers)
	var batch []item
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	for total := 0; total < producers*perProd; {
		var err error
		batch, err = q.PopAll(ctx, batch[:0])
		if err != nil {
			t.Fatalf("PopAll after %d items: %v", total, err)
		}
		if len(batch) > capacity {
			t.Fatalf("batch of %d from a queue of %d", len(batch), capacity)
		}
		for _, it := range batch {
			if it.seq != next[it.p] {
				t.Fatalf("producer %d: got seq %d, want %d", it.p, it.seq, next[it.p])
			}
			next[it.p]++
		}
		total += len(batch)
	}
	wg.Wait()
	q.Close(func(it item) { t.Errorf("left over after all were consumed: %v", it) })
}
