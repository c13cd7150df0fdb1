package streamsock

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// A write that fails inside a coalesced segment reports only the frames of
// it that are not on the wire.
//
// The bug: small (coalesced) frames against a stalled peer: the writer's
// write fails at the teardown deadline inside a 1 MiB coalesced segment;
// run() reported the whole segment from s.off, including frames already on
// the wire.
func TestAWriteCutInsideACoalescedSegmentReportsOnlyItsUnwrittenFrames(t *testing.T) {
	const n = 3000
	peer := newRawPeer(t, smallBuf)
	nw := &testNet{sndbuf: smallBuf, release: make(chan struct{})}
	tx := newNodeOn(t, nw, Config{TeardownGrace: 300 * time.Millisecond, ChannelBytes: 64 << 20})
	writing := make(chan struct{})
	var once sync.Once
	tx.t.testWriteHook = func([]segment) { once.Do(func() { close(writing) }) }
	fails := recordFailures(tx.a, peer.id)
	if err := tx.t.Register(peer.info()); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1000)
	for i := 0; i < n; i++ {
		if out, err := tx.t.Send(peer.id, seqMsg(i, payload)); err != nil || !out.Admitted() {
			t.Fatalf("send %d", i)
		}
	}
	close(nw.release)
	conn := peer.accept(t)
	<-writing
	tx.t.Shutdown()
	<-tx.t.Closed()
	reported, _ := fails.check(t)
	delivered := readFrames(t, conn)
	t.Logf("delivered %d, reported %d (n=%d)", len(delivered), len(reported), n)
	checkAccounted(t, n, delivered, reported)
}

// Sends that waited in the admission gate and were failed when their lane
// died are reported through ReportSendError, once each.
//
// The bug: they were failed silently. A messenger caller whose request was
// Pending waits on its reply, not on the admission, and would otherwise
// wait for its deadline (for ever without one).
func TestSendsWaitingInTheGateAreReportedWhenTheirLaneDies(t *testing.T) {
	const n = 400
	peer := newRawPeer(t, smallBuf)
	nw := &testNet{sndbuf: smallBuf}
	tx := newNodeOn(t, nw, Config{ChannelBytes: 32 << 10})
	fails := recordFailures(tx.a, peer.id)
	if err := tx.t.Register(peer.info()); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1000)
	type pending struct {
		seq int
		adm *ext.Admission
	}
	var waiting []pending
	for i := 0; i < n; i++ {
		out, err := tx.t.Send(peer.id, seqMsg(i, payload))
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if a := out.Admission(); a != nil {
			waiting = append(waiting, pending{i, a})
		}
	}
	if len(waiting) == 0 {
		t.Fatal("no send waited in the gate: the test did not fill the channel")
	}
	peer.accept(t).Close() // the peer goes away with the channel full
	var failedSeqs []int
	for _, w := range waiting {
		<-w.adm.Done()
		if w.adm.Err() != nil {
			failedSeqs = append(failedSeqs, w.seq)
		}
	}
	if len(failedSeqs) == 0 {
		t.Fatal("no pending send failed: the lane did not die with sends waiting")
	}
	// A gate failure is reported right after its admission resolves; wait
	// for the reports of every failed one.
	deadline := time.Now().Add(5 * time.Second)
	for {
		reported, _ := fails.check(t)
		rep := map[int]bool{}
		for _, s := range reported {
			rep[s] = true
		}
		silent := 0
		for _, s := range failedSeqs {
			if !rep[s] {
				silent++
			}
		}
		if silent == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sends that failed in the gate were never reported", silent, len(failedSeqs))
		}
		runtime.Gosched()
	}
}
