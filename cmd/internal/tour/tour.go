// Package tour is the in-process tour of velo's call patterns: two nodes
// over loopback TCP, one step per pattern, each printed with what it
// showed and how long it took. `velo tour` runs it alone; `velo-bench demo
// --discovery etcd|nats` runs it with the nodes finding each other through
// an embedded server, which is why the backend comes in from outside.
package tour

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamx"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// Discovery is a backend the tour's nodes use instead of being registered
// by hand. Open is called once per node, so each gets its own client, as
// a separate process would have.
type Discovery struct {
	About string // one line for the output: what the backend is and where
	Open  func() (ext.PeerDiscovery, error)
}

// Run runs every step and writes one line per step to w. disc may be nil.
// The handlers keep process-wide state, so Run runs once per process.
func Run(w io.Writer, disc *Discovery) error {
	ctx := context.Background()
	fmt.Fprintln(w, "velo tour: two nodes over TCP on loopback")
	if disc != nil {
		fmt.Fprintln(w, "  discovery:", disc.About)
	}
	a, err := demoNode(ctx, disc)
	if err != nil {
		return err
	}
	b, err := demoNode(ctx, disc)
	if err != nil {
		return err
	}
	defer shutdownWithin(a, 2*time.Second)
	fmt.Fprintf(w, "  node A %s at %s\n", a.InstanceID(), tcpAddr(a))
	fmt.Fprintf(w, "  node B %s at %s\n", b.InstanceID(), tcpAddr(b))
	if err := registerDemoHandlers(b); err != nil {
		return err
	}
	if disc == nil {
		if err := a.RegisterPeer(b.PeerInfo()); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w, "  nothing registered by hand: each node published itself, and A finds B on its first call")
	}
	steps := []struct {
		name string
		run  func() (string, error)
	}{
		{"typed unary add(3, 4)", func() (string, error) { return demoTyped(ctx, a, b) }},
		{"sync call to a handler that checks its input", func() (string, error) { return demoSync(ctx, a, b) }},
		{"ordered handler, 5 messages sent at once", func() (string, error) { return demoOrdered(ctx, a, b) }},
		{"call with a 50 ms deadline to a slow handler", func() (string, error) { return demoTimeout(ctx, a, b) }},
		{"1000 unary round trips", func() (string, error) { return demoRoundTrips(ctx, a, b) }},
		{"1000 chained UnaryAsync calls to an inline handler", func() (string, error) { return demoAsync(ctx, a, b) }},
		{"a 16 MiB payload in one unary call (staged by rendezvous)", func() (string, error) { return demoLarge(ctx, a, b) }},
		{"A waits on an event that B triggers", func() (string, error) { return demoEvent(ctx, a, b) }},
		{"A streams tokens to an anchor on B until B asks it to stop", func() (string, error) { return demoStream(ctx, a, b) }},
		{"B drains, then A calls it", func() (string, error) { return demoDrain(ctx, a, b) }},
	}
	for i, s := range steps {
		start := time.Now()
		out, err := s.run()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(w, "%d. %s\n   %s (%v)\n", i+1, s.name, out, time.Since(start).Round(time.Microsecond))
	}
	if disc != nil {
		d, err := disc.Open()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%d. B withdrew its entry when it shut down\n   %s\n", len(steps)+1, lookupAfterShutdown(ctx, d, b.InstanceID()))
	}
	return nil
}

func demoNode(ctx context.Context, disc *Discovery) (*velo.Node, error) {
	tr, err := tcp.New()
	if err != nil {
		return nil, err
	}
	opts := []velo.Option{velo.WithTransport(tr)}
	if disc != nil {
		d, err := disc.Open()
		if err != nil {
			return nil, err
		}
		opts = append(opts, velo.WithDiscovery(d))
	}
	return velo.New(ctx, opts...)
}

type addReq struct{ A, B int }
type addResp struct{ Sum int }

var (
	orderedMu  sync.Mutex
	orderedSeq []string
	orderedAll = make(chan struct{})
)

func registerDemoHandlers(n *velo.Node) error {
	hs := []velo.Handler{
		velo.TypedUnaryHandler("add", func(_ *velo.Context, r addReq) (addResp, error) {
			return addResp{Sum: r.A + r.B}, nil
		}),
		velo.SyncHandler("check", func(c *velo.Context) error {
			if len(c.Payload) == 0 {
				return errors.New("empty input")
			}
			return nil
		}),
		velo.FireHandler("log", func(c *velo.Context) {
			orderedMu.Lock()
			defer orderedMu.Unlock()
			orderedSeq = append(orderedSeq, string(c.Payload))
			if len(orderedSeq) == 5 {
				close(orderedAll)
			}
		}, velo.WithOrdered()),
		velo.UnaryHandler("slow", func(c *velo.Context) ([]byte, error) {
			time.Sleep(200 * time.Millisecond)
			return []byte("late"), nil
		}),
		velo.UnaryHandler("digest", func(c *velo.Context) ([]byte, error) {
			sum := sha256.Sum256(c.Payload)
			return []byte(fmt.Sprintf("%d bytes, sha256 %x", len(c.Payload), sum[:8])), nil
		}),
		velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
			return append([]byte(nil), c.Payload...), nil
		}),
		velo.UnaryHandler("echo-inline", func(c *velo.Context) ([]byte, error) {
			return append([]byte(nil), c.Payload...), nil
		}, velo.WithInline()),
	}
	for _, h := range hs {
		if err := n.Register(h); err != nil {
			return err
		}
	}
	return nil
}

func demoTyped(ctx context.Context, a, b *velo.Node) (string, error) {
	resp, err := velo.TypedUnary[addResp](ctx, a, b.InstanceID(), "add", addReq{A: 3, B: 4})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("B answered sum=%d; the first call also ran the handshake", resp.Sum), nil
}

func demoSync(ctx context.Context, a, b *velo.Node) (string, error) {
	if err := a.Sync(ctx, b.InstanceID(), "check", []byte("ok")); err != nil {
		return "", err
	}
	err := a.Sync(ctx, b.InstanceID(), "check", nil)
	var re *velo.RemoteError
	if !errors.As(err, &re) {
		return "", fmt.Errorf("expected a remote error, got %v", err)
	}
	return fmt.Sprintf("good input: acked; empty input: nacked with %q", re.Message), nil
}

func demoOrdered(ctx context.Context, a, b *velo.Node) (string, error) {
	for i := 1; i <= 5; i++ {
		if err := a.Send(ctx, b.InstanceID(), "log", []byte(fmt.Sprint(i))); err != nil {
			return "", err
		}
	}
	select {
	case <-orderedAll:
	case <-time.After(5 * time.Second):
		return "", errors.New("ordered messages did not all arrive")
	}
	orderedMu.Lock()
	defer orderedMu.Unlock()
	return fmt.Sprintf("B handled them in order %v", orderedSeq), nil
}

func demoTimeout(ctx context.Context, a, b *velo.Node) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := a.Unary(cctx, b.InstanceID(), "slow", nil)
	if !errors.Is(err, velo.ErrRequestTimeout) {
		return "", fmt.Errorf("expected a timeout, got %v", err)
	}
	return fmt.Sprintf("failed with %q; the slot is free again and the late reply will be dropped", err), nil
}

func demoRoundTrips(ctx context.Context, a, b *velo.Node) (string, error) {
	payload := make([]byte, 64)
	start := time.Now()
	const n = 1000
	for i := 0; i < n; i++ {
		if _, err := a.Unary(ctx, b.InstanceID(), "echo", payload); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("mean round trip %v with 64 B payloads", (time.Since(start) / n).Round(100*time.Nanosecond)), nil
}

// demoAsync chains calls through their callbacks: each answer, on the
// goroutine that read it, sends the next request. No goroutine waits.
func demoAsync(ctx context.Context, a, b *velo.Node) (string, error) {
	const n = 1000
	payload := make([]byte, 64)
	done := make(chan error, 1)
	left := n
	var next func([]byte, error)
	next = func(_ []byte, err error) {
		if left--; err != nil || left < 0 {
			done <- err
			return
		}
		if err := a.UnaryAsync(ctx, b.InstanceID(), "echo-inline", payload, next); err != nil {
			done <- err
		}
	}
	start := time.Now()
	next(nil, nil)
	if err := <-done; err != nil {
		return "", err
	}
	return fmt.Sprintf("mean round trip %v with 64 B payloads", (time.Since(start) / n).Round(100*time.Nanosecond)), nil
}

func demoDrain(ctx context.Context, a, b *velo.Node) (string, error) {
	b.BeginDrain()
	start := time.Now()
	_, err := a.Unary(ctx, b.InstanceID(), "echo", []byte("late"))
	if !errors.Is(err, velo.ErrShuttingDown) {
		return "", fmt.Errorf("expected ErrShuttingDown, got %v", err)
	}
	took := time.Since(start)
	if err := b.Shutdown(context.Background()); err != nil {
		return "", err
	}
	return fmt.Sprintf("A's call failed fast (%v) with the drain echo; B then shut down", took.Round(time.Microsecond)), nil
}

func demoEvent(ctx context.Context, a, b *velo.Node) (string, error) {
	// B owns the event: it answers A's subscription and tells A when the
	// event completes, so it must know A.
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		return "", err
	}
	e, err := b.Events.NewEvent()
	if err != nil {
		return "", err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	subs := a.Events.Subscriptions()
	var woke time.Time
	done := make(chan error, 1)
	go func() {
		err := a.Events.Wait(wctx, e.Handle())
		woke = time.Now()
		done <- err
	}()
	// Let A's subscription go out first, so the trigger travels as a
	// notice to a subscriber.
	for a.Events.Subscriptions() == subs && wctx.Err() == nil {
		time.Sleep(100 * time.Microsecond)
	}
	start := time.Now()
	if err := e.Trigger(); err != nil {
		return "", err
	}
	if err := <-done; err != nil {
		return "", fmt.Errorf("node A's wait: %w", err)
	}
	took := woke.Sub(start)
	// A second wait is answered from A's cache of completed events.
	again := time.Now()
	if err := a.Events.Wait(wctx, e.Handle()); err != nil {
		return "", err
	}
	return fmt.Sprintf("A woke %v after B's trigger, over %d subscription; a second wait took %v, from A's cache, with no message",
		took.Round(time.Microsecond), a.Events.Subscriptions()-subs, time.Since(again).Round(100*time.Nanosecond)), nil
}

func demoStream(ctx context.Context, a, b *velo.Node) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	anchor, err := streaming.CreateAnchor[[]byte](b.Streams)
	if err != nil {
		return "", err
	}
	defer anchor.Close()
	start := time.Now()
	sender, err := streaming.AttachAnchor[[]byte](sctx, a.Streams, anchor.Handle())
	if err != nil {
		return "", err
	}
	defer sender.Close()
	attached := time.Since(start)
	go produceUntilStopped(sctx, sender)
	// B reads five tokens, asks A to stop, and reads on to the end: the
	// tokens already on their way, then A's final item.
	var got []string
	for item, err := range anchor.All(sctx) {
		if err != nil {
			return "", err
		}
		got = append(got, string(item))
		if len(got) == 5 {
			anchor.Controller().RequestStop()
		}
	}
	out := streamx.MuxStats(b.Streams)
	perBatch := 0.0
	if out.BatchesReceived > 0 {
		perBatch = float64(out.RecordsReceived) / float64(out.BatchesReceived)
	}
	return fmt.Sprintf("B read %q, asked A to stop after 5, then read A's final item and io.EOF, over %s; "+
		"the attach took %v; B received %d mux batches, %.1f records per batch",
		got, sender.NegotiatedTransport(), attached.Round(time.Microsecond), out.BatchesReceived, perBatch), nil
}

// produceUntilStopped sends a token every millisecond until the consumer
// asks to stop, then answers the stop with a final item and finalizes.
func produceUntilStopped(ctx context.Context, sender *streaming.Sender[[]byte]) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		if sender.Send(ctx, fmt.Appendf(nil, "tok%d", n)) != nil {
			return
		}
		select {
		case <-sender.Stopped():
			sender.Send(ctx, fmt.Appendf(nil, "[stopped after %d tokens]", n))
			sender.Finalize()
			return
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// tcpAddr is the address a peer would dial to reach n over TCP.
func tcpAddr(n *velo.Node) string {
	addr, err := tcp.DialAddr(n.PeerInfo().Address[tcp.Key])
	if err != nil {
		return err.Error()
	}
	return addr
}

// shutdownWithin shuts n down, draining for at most d.
func shutdownWithin(n interface{ Shutdown(context.Context) error }, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Shutdown(ctx)
}

// demoLarge sends 16 MiB in one unary call: above 256 KiB the messenger
// stages the payload on A and sends a handle; B pulls it in 512 KiB chunks
// before its handler runs, and releases it.
func demoLarge(ctx context.Context, a, b *velo.Node) (string, error) {
	payload := make([]byte, 16<<20)
	for i := range payload {
		payload[i] = byte(i * 31)
	}
	sum := sha256.Sum256(payload)
	stagedBefore, _ := a.Rendezvous.Transparent()
	_, fetchedBefore := b.Rendezvous.Transparent()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := a.Unary(cctx, b.InstanceID(), "digest", payload)
	if err != nil {
		return "", err
	}
	if want := fmt.Sprintf("%d bytes, sha256 %x", len(payload), sum[:8]); string(resp) != want {
		return "", fmt.Errorf("node B saw %q, node A sent %q", resp, want)
	}
	staged, _ := a.Rendezvous.Transparent()
	_, fetched := b.Rendezvous.Transparent()
	// The release is a fire-and-forget message: give it a moment.
	var held int64
	for i := 0; i < 100; i++ {
		if held, _ = a.Rendezvous.HeldBytes(); held == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Sprintf("B's handler saw %s (same as sent); A staged %d payload, B fetched %d; A holds %d bytes after the release",
		resp, staged-stagedBefore, fetched-fetchedBefore, held), nil
}

// lookupAfterShutdown shows the last step: a node that shut down has
// withdrawn its entry, so a fresh lookup finds nothing.
func lookupAfterShutdown(ctx context.Context, d ext.PeerDiscovery, id ext.InstanceID) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := d.DiscoverInstance(ctx, id)
	return fmt.Sprintf("lookup of B after its shutdown: %v", err)
}
