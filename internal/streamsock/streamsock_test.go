package streamsock

import (
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tcpNet is a minimal Network for tests in this package.
type tcpNet struct{}

func (tcpNet) Listen(ctx context.Context) (net.Listener, []byte, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	return ln, []byte(ln.Addr().String()), nil
}

func (tcpNet) Dial(ctx context.Context, ep []byte) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", string(ep))
}

type testNode struct {
	id ext.InstanceID
	t  *Transport
	a  *ext.TransportAdapter
}

func newNode(tb testing.TB, cfg Config) *testNode {
	tb.Helper()
	return newNodeOn(tb, tcpNet{}, cfg)
}

func (n *testNode) info() ext.PeerInfo {
	return ext.PeerInfo{InstanceID: n.id, Address: ext.WorkerAddress{"tcp": []byte(n.t.ln.Addr().String())}}
}

// consume takes messages off n until stop closes, counting them.
func consume(n *testNode, count *atomic.Int64, stop <-chan struct{}) *sync.WaitGroup {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-stop
		cancel()
	}()
	go func() {
		defer wg.Done()
		var batch []ext.InboundMessage
		for {
			var err error
			if batch, err = n.a.Messages().PopAll(ctx, batch[:0]); err != nil {
				return
			}
			ext.DoneAll(batch)
			count.Add(int64(len(batch)))
		}
	}()
	return &wg
}

func waitCount(t testing.TB, c *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d", c.Load(), want)
		}
		runtime.Gosched()
	}
}

func pair(tb testing.TB) (tx, rx *testNode) {
	rx = newNode(tb, Config{})
	tx = newNode(tb, Config{})
	if err := tx.t.Register(rx.info()); err != nil {
		tb.Fatal(err)
	}
	return tx, rx
}

// The steady-state send path of a frame up to 64 KiB allocates nothing:
// not the sender, not the writer, not the reader, not the consumer.
// (AllocsPerRun counts every goroutine's allocations.)
func TestSendPathDoesNotAllocate(t *testing.T) {
	tx, rx := pair(t)
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	sent := int64(0)
	for _, size := range []int{64, 1024, 64<<10 - 64} {
		f := ext.Frame{Type: ext.Message, Header: make([]byte, 32), Payload: make([]byte, size)}
		send := func() {
			out, err := tx.t.Send(rx.id, f)
			if err != nil || !out.Admitted() {
				t.Fatalf("send: admitted %v, %v", out.Admitted(), err)
			}
			sent++
			// Stay in the steady state: let the receiver catch up before
			// the channel fills and sends start waiting in the gate (that
			// path allocates an admission, by design).
			if sent%16 == 0 {
				waitCount(t, &got, sent)
			}
		}
		for i := 0; i < 2000; i++ { // warm: dial, grow buffers, fill pools
			send()
		}
		waitCount(t, &got, sent)
		allocs := testing.AllocsPerRun(2000, send)
		if allocs != 0 {
			t.Errorf("payload %d B: %.2f allocations per frame, want 0", size, allocs)
		}
		waitCount(t, &got, sent)
	}
}

// A burst of small frames leaves in far fewer writes than frames: the
// writer takes everything queued in one step. The burst queues behind a
// dial the test holds, so no frame can be written before the burst is in
// (and the hook never blocks a sender: an inline write calls it too).
func TestBurstCoalescesWrites(t *testing.T) {
	rx := newNode(t, Config{})
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()

	nw := &testNet{release: make(chan struct{})}
	tx := newNodeOn(t, nw, Config{})
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	var writes, frames atomic.Int64
	tx.t.testWriteHook = func(segs []segment) {
		writes.Add(1)
		for _, s := range segs {
			frames.Add(int64(s.frames))
		}
	}
	f := ext.Frame{Type: ext.Message, Payload: make([]byte, 100)}
	const burst = 1001
	for i := 0; i < burst; i++ {
		if _, err := tx.t.Send(rx.id, f); err != nil {
			t.Fatal(err)
		}
	}
	close(nw.release)
	waitCount(t, &got, burst)
	if frames.Load() != burst {
		t.Fatalf("writer saw %d frames, want %d", frames.Load(), burst)
	}
	if w := writes.Load(); w > 3 {
		t.Fatalf("%d frames took %d writes; the burst should coalesce into one or two", burst, w)
	}
}

// Goroutines are per connection, never per frame: two per outbound lane
// (writer, echo reader), one per accepted connection.
func TestGoroutinesArePerConnection(t *testing.T) {
	rx := newNode(t, Config{})
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()
	const peers, lanes = 4, 3
	var txs []*testNode
	for i := 0; i < peers; i++ {
		tx := newNode(t, Config{Lanes: lanes})
		if err := tx.t.Register(rx.info()); err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	// Connection goroutines of earlier tests may still be winding down
	// (a transport's Closed gives up waiting after its grace); counting
	// them in the base made the count drop as they left. Start from none.
	settle := time.Now().Add(10 * time.Second)
	for transportGoroutines() != 0 {
		if time.Now().After(settle) {
			t.Fatalf("%d connection goroutines of earlier tests never ended", transportGoroutines())
		}
		runtime.Gosched()
	}
	base := 0
	f := ext.Frame{Type: ext.Message, Payload: make([]byte, 16)}
	total := int64(0)
	for round := 0; round < 3; round++ {
		for _, tx := range txs {
			for l := 0; l < lanes; l++ {
				for i := 0; i < 1000; i++ {
					if _, err := tx.t.SendOnLane(rx.id, l, f); err != nil {
						t.Fatal(err)
					}
					total++
				}
			}
		}
		waitCount(t, &got, total)
		conns := peers * lanes
		// A goroutine that was just started may not show in a stack dump
		// yet, so allow the count a moment to settle; it must never exceed
		// three per connection, whatever the frame count.
		deadline := time.Now().Add(5 * time.Second)
		for {
			g := transportGoroutines() - base
			if g > 3*conns {
				t.Fatalf("round %d: %d goroutines for %d connections and %d frames, want %d", round, g, conns, total, 3*conns)
			}
			if g == 3*conns {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d goroutines for %d connections, want %d", round, g, conns, 3*conns)
			}
			runtime.Gosched()
		}
	}
}

func BenchmarkSend64(b *testing.B) {
	tx, rx := pair(b)
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	f := ext.Frame{Type: ext.Message, Payload: make([]byte, 64)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := tx.t.Send(rx.id, f)
		if err != nil {
			b.Fatal(err)
		}
		if !out.Admitted() {
			out.Wait(context.Background())
		}
	}
	waitCount(b, &got, int64(b.N))
	b.StopTimer()
	close(stop)
	wg.Wait()
}

// transportGoroutines counts the goroutines this package runs for
// connections (writers, echo readers, accepted-connection readers), read
// from a stack dump: runtime.NumGoroutine also counts short-lived runtime
// and dial helpers, which made the count flaky.
func transportGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"streamsock.(*lane).run(", "streamsock.(*lane).readEchoes(", "streamsock.(*Transport).serve("} {
			if strings.Contains(g, fn) {
				n++
				break
			}
		}
	}
	return n
}
