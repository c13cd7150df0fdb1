//go:build ucx

package ucx

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCloseAnswersOutstanding: with the peer hung (a child process
// stopped with SIGSTOP), GETs and sends are outstanding when Close runs;
// Close answers every one before it returns.
//
// The hung owner is a stopped process, never a paused worker of this one:
// UCX 1.13 emulates GET over tcp with Active Messages, and an owner that
// answers a GET request of a consumer already gone aborts the process
// (ucs_fatal in ucp_get_req_handler). A stopped process never answers.
func TestCloseAnswersOutstanding(t *testing.T) {
	c := startChild(t)
	a, err := NewWorker(Config{TLS: "tcp", NoPeerErrors: shmOnly(), DrainTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ab, err := a.Connect(c.addr)
	if err != nil {
		t.Fatal(err)
	}
	// A round trip first, so the endpoint is wired up before the peer hangs.
	if err := a.Get(context.Background(), ab, c.raddr, c.key, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	const gets, sends = 8, 32
	var wg sync.WaitGroup
	getErrs := make(chan error, gets)
	for range gets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			getErrs <- a.Get(context.Background(), ab, c.raddr, c.key, make([]byte, 1<<20))
		}()
	}
	sendErrs := make(chan error, sends)
	big := make([]byte, 1<<20)
	for range sends {
		if err := a.SendAM(ab, 4, nil, big, func(err error) { sendErrs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	if !shmOnly() {
		waitUntil(t, "the GETs to be posted", func() bool { return a.Stats().Inflight >= gets })
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait() // every Get has returned
	close(getErrs)
	for err := range getErrs {
		// Over shared memory the GET is a one-sided read (cma), which a
		// stopped process does not hold up.
		if !errors.Is(err, ErrClosed) && !(shmOnly() && err == nil) {
			t.Errorf("GET to a hung peer at Close: %v, want ErrClosed", err)
		}
	}
	if len(sendErrs) != sends {
		t.Fatalf("%d of %d sends answered when Close returned", len(sendErrs), sends)
	}
	closed := 0
	for range sends {
		if err := <-sendErrs; errors.Is(err, ErrClosed) {
			closed++
		} else if err != nil {
			t.Errorf("send at Close: %v", err)
		}
	}
	if closed == 0 {
		t.Error("no 1 MiB send to a hung peer was outstanding at Close")
	}
	if s := a.Stats(); s.Inflight != 0 {
		t.Fatalf("operations left after Close: %+v", s)
	}
	// Everything after Close is refused.
	if err := a.Get(context.Background(), ab, c.raddr, c.key, make([]byte, 8)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := a.SendAM(ab, 4, nil, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("SendAM after Close: %v", err)
	}
	if _, err := a.Connect(c.addr); !errors.Is(err, ErrClosed) {
		t.Fatalf("Connect after Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestGetCancelAbandonsWait: a cancelled Get returns at once; the GET
// itself stays posted (its buffer pinned) until UCX completes it.
func TestGetCancelAbandonsWait(t *testing.T) {
	p := newPair(t)
	m, _, key := mapped(t, p.b, 4096)
	if err := p.a.Get(context.Background(), p.ab, m.Addr(), key, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	resume := p.b.pause()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- p.a.Get(ctx, p.ab, m.Addr(), key, make([]byte, 4096)) }()
	waitUntil(t, "the GET to be posted", func() bool { return p.a.Stats().Inflight == 1 })
	cancel()
	if err := wait(t, res, "the cancelled Get"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Get: %v", err)
	}
	if n := p.a.Stats().Inflight; n != 1 {
		t.Fatalf("the abandoned GET is not in flight (%d)", n)
	}
	resume()
	waitUntil(t, "the abandoned GET to complete", func() bool { return p.a.Stats().Inflight == 0 })
}

// TestUnmapWaitsForLocalGets: an Unmap of the region a GET writes into
// waits for the GET, and refuses new GETs into it meanwhile.
func TestUnmapWaitsForLocalGets(t *testing.T) {
	p := newPair(t)
	src, _, key := mapped(t, p.b, 8192)
	if err := p.a.Get(context.Background(), p.ab, src.Addr(), key, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	dstMem, dst, _ := mapped(t, p.a, 8192)
	resume := p.b.pause()
	got := make(chan error, 1)
	go func() { got <- p.a.Get(context.Background(), p.ab, src.Addr(), key, dst[:4096]) }()
	waitUntil(t, "the GET to be posted", func() bool { return p.a.Stats().Inflight == 1 })

	unmapped := make(chan error, 1)
	go func() { unmapped <- dstMem.Unmap() }()
	waitUntil(t, "the Unmap to park", func() bool { return p.a.Stats().UnmapsWait == 1 })
	if err := p.a.Get(context.Background(), p.ab, src.Addr(), key, dst[4096:]); !errors.Is(err, ErrGetFailed) {
		t.Fatalf("a GET into a region being unmapped: %v", err)
	}
	select {
	case err := <-unmapped:
		t.Fatalf("Unmap returned (%v) while a GET wrote into the region", err)
	default:
	}
	resume()
	if err := wait(t, got, "the GET"); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, unmapped, "Unmap"); err != nil {
		t.Fatal(err)
	}
	if err := dstMem.Unmap(); err != nil {
		t.Fatalf("second Unmap: %v", err)
	}
}

// TestRendezvousRefused: a rendezvous-mode message never reaches the
// handler, is counted, and fails its sender.
func TestRendezvousRefused(t *testing.T) {
	p := newPair(t)
	got := collect(p.b, 5, 2)
	done := make(chan error, 1)
	if err := p.a.sendRndv(p.ab, 5, []byte("h"), make([]byte, 256<<10), func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, done, "the rendezvous send"); !errors.Is(err, ErrSendFailed) {
		t.Fatalf("the refused rendezvous send completed with %v", err)
	}
	waitUntil(t, "the refusal", func() bool { return p.b.Stats().RndvRefused == 1 })
	// An eager message after it arrives; the refused one never did.
	if err := p.a.SendAM(p.ab, 5, []byte("e"), nil, nil); err != nil {
		t.Fatal(err)
	}
	if m := wait(t, got, "the eager message"); string(m.header) != "e" {
		t.Fatalf("the handler got %q", m.header)
	}
}

// TestBlockingCallsOnProgressThread: from a handler, calls that would
// wait for the progress thread refuse instead of deadlocking.
func TestBlockingCallsOnProgressThread(t *testing.T) {
	p := newPair(t)
	res := make(chan [3]error, 1)
	p.b.SetAMHandler(2, func(h, d []byte) {
		_, cerr := p.b.Connect(p.a.Address())
		gerr := p.b.Get(context.Background(), p.ba, 1, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 1))
		res <- [3]error{cerr, gerr, p.b.Close()}
	})
	if err := p.a.SendAM(p.ab, 2, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	for i, err := range wait(t, res, "the handler") {
		if !errors.Is(err, ErrProgressThread) {
			t.Errorf("call %d: %v, want ErrProgressThread", i, err)
		}
	}
}
