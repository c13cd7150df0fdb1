package rdmapath

import (
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/velo-go/velo/metrics"
)

// counts is a Recorder that keeps every decision.
type counts map[Reason]int

func (c counts) PathDecision(r metrics.RdmaPathReason) { c[r]++ }

func TestKillSwitch(t *testing.T) {
	for _, v := range []string{"1", "true", "TRUE", "Yes", "on", "ON"} {
		if !KillSwitch(v) {
			t.Errorf("%q: not affirmative", v)
		}
	}
	for _, v := range []string{"", "0", "false", "no", "off", "ture", " 1", "yes please"} {
		if KillSwitch(v) {
			t.Errorf("%q: affirmative", v)
		}
	}
}

func TestConsumerOffer(t *testing.T) {
	onUCX := func(k string) bool { return k == BackendNameUCX }
	onTCP := func(k string) bool { return k == "tcp" }
	cases := []struct {
		name  string
		c     Consumer
		owner func(string) bool
		want  Reason
	}{
		{"no registry", Consumer{}, onUCX, metrics.RdmaNotConfigured},
		{"no registry before kill switch", Consumer{Disabled: true}, onUCX, metrics.RdmaNotConfigured},
		{"kill switch", Consumer{Backend: "ucx", Disabled: true}, onUCX, metrics.RdmaKillSwitch},
		{"kill switch before the owner's transports", Consumer{Backend: "ucx", Disabled: true}, onTCP, metrics.RdmaKillSwitch},
		{"owner not on ucx", Consumer{Backend: "ucx"}, onTCP, metrics.RdmaNoOffer},
		{"owner not registered yet", Consumer{Backend: "ucx"}, nil, metrics.RdmaNoOffer},
		{"offer", Consumer{Backend: "ucx"}, onUCX, metrics.RdmaOK},
	}
	for _, c := range cases {
		offer, why := c.c.Offer(c.owner)
		if why != c.want || (offer != nil) != (why == metrics.RdmaOK) {
			t.Errorf("%s: %v, %s; want %s", c.name, offer, why, c.want)
		}
		if offer != nil && !reflect.DeepEqual(offer.Backends, []string{"ucx"}) {
			t.Errorf("%s: offer names %v", c.name, offer.Backends)
		}
	}
}

func offered(rec Recorder) Transfer {
	return Begin(rec, &Offer{Backends: []string{"ucx"}}, metrics.RdmaOK)
}

// This build's transfer: no offer, counted once, a Ready answer, nothing else.
func TestTransferNoOffer(t *testing.T) {
	rec := counts{}
	tr := Begin(rec, nil, metrics.RdmaNotConfigured)
	if tr.Offer() != nil {
		t.Fatal("an offer with none made")
	}
	if err := tr.Answer(false); err != nil {
		t.Fatal(err)
	}
	tr.Done()
	if !reflect.DeepEqual(rec, counts{metrics.RdmaNotConfigured: 1}) {
		t.Errorf("recorded %v", rec)
	}
	// An Rdma answer to no offer is refused.
	tr = Begin(rec, nil, metrics.RdmaNotConfigured)
	if err := tr.Answer(true); !errors.Is(err, ErrUnaskedRdma) {
		t.Errorf("unasked Rdma: %v", err)
	}
}

func TestTransferRdmaOK(t *testing.T) {
	rec := counts{}
	tr := offered(rec)
	if tr.Offer() == nil || tr.Answer(true) != nil {
		t.Fatal("offer or answer")
	}
	tr.Done()
	if !reflect.DeepEqual(rec, counts{metrics.RdmaOK: 1}) || tr.FellBack() {
		t.Errorf("recorded %v, fell back %v", rec, tr.FellBack())
	}
}

// The owner may answer an offer chunked (below_min on its side, say): no
// consumer-side decision is recorded, and there is nothing to fall back from.
func TestTransferOfferAnsweredChunked(t *testing.T) {
	rec := counts{}
	tr := offered(rec)
	_ = tr.Answer(false)
	if err := tr.Fail(metrics.RdmaGetFailed); !errors.Is(err, ErrNoRdmaToFail) {
		t.Errorf("Fail on the chunked path: %v", err)
	}
	tr.Done()
	if len(rec) != 0 {
		t.Errorf("recorded %v", rec)
	}
}

// A failed GET falls back once, with its reason, and the re-acquire
// carries no offer; a second Rdma answer then fails the transfer instead
// of trying RDMA again, and records nothing more.
func TestTransferFallbackExactlyOnce(t *testing.T) {
	for _, why := range []Reason{metrics.RdmaGetFailed, metrics.RdmaDecodeError, metrics.RdmaPoolExhausted} {
		rec := counts{}
		tr := offered(rec)
		_ = tr.Answer(true)
		if err := tr.Fail(why); err != nil {
			t.Fatal(err)
		}
		if tr.Offer() != nil || !tr.FellBack() {
			t.Fatalf("%s: after a failure the offer is %v", why, tr.Offer())
		}
		if err := tr.Fail(why); !errors.Is(err, ErrNoRdmaToFail) {
			t.Errorf("%s: a second Fail before the re-acquire: %v", why, err)
		}
		// The broken owner answers the fallback acquire with Rdma again.
		if err := tr.Answer(true); !errors.Is(err, ErrUnaskedRdma) {
			t.Errorf("%s: Rdma after the fallback: %v", why, err)
		}
		if err := tr.Fail(metrics.RdmaGetFailed); !errors.Is(err, ErrNoRdmaToFail) {
			t.Errorf("%s: Fail after the broken answer: %v", why, err)
		}
		tr.Done()
		if !reflect.DeepEqual(rec, counts{why: 1}) {
			t.Errorf("%s: recorded %v", why, rec)
		}
		// A good owner answers the fallback Ready, and the chunked pull finishes.
		rec = counts{}
		tr = offered(rec)
		_ = tr.Answer(true)
		_ = tr.Fail(why)
		if err := tr.Answer(false); err != nil {
			t.Fatal(err)
		}
		tr.Done()
		if !reflect.DeepEqual(rec, counts{why: 1}) {
			t.Errorf("%s, good owner: recorded %v", why, rec)
		}
	}
}

// Answer out of turn (a second answer to one acquire) is refused.
func TestTransferAnswerOutOfTurn(t *testing.T) {
	tr := offered(counts{})
	_ = tr.Answer(true)
	if err := tr.Answer(false); err == nil {
		t.Error("a second answer to one acquire was taken")
	}
}

// A grant hands its descriptor to one GET; replays and forgeries are
// refused before anything could reach a backend.
func TestGrant(t *testing.T) {
	b := valid(t)
	g, err := NewGrant(b, BackendUCX, -1)
	if err != nil {
		t.Fatal(err)
	}
	clear(b) // the grant owns its key
	d, err := g.Take()
	if err != nil || d.Len != 4096 || string(d.Rkey) != "\x01\x02\x03\x04" {
		t.Fatalf("Take = %+v, %v", d, err)
	}
	if _, err := g.Take(); !errors.Is(err, ErrGrantSpent) {
		t.Errorf("replay: %v", err)
	}
	forged := append(valid(t), 0)
	if _, err := NewGrant(forged, BackendUCX, -1); !errors.Is(err, ErrBadDescriptor) {
		t.Errorf("forged: %v", err)
	}
	if _, err := NewGrant(valid(t), 7, -1); !errors.Is(err, ErrUnknownBackend) {
		t.Errorf("a backend this consumer lacks: %v", err)
	}
	if _, err := NewGrant(valid(t), BackendUCX, 4095); !errors.Is(err, ErrPayloadOverLimit) || errors.Is(err, ErrBadDescriptor) {
		t.Errorf("over the limit: %v", err)
	}
	if _, err := NewGrant(valid(t), BackendUCX, 4096); err != nil {
		t.Errorf("at the limit: %v", err)
	}
}

// Racing takers: exactly one gets the descriptor.
func TestGrantSingleUseRace(t *testing.T) {
	g, _ := NewGrant(valid(t), BackendUCX, -1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.Take(); err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d takers got the descriptor", wins)
	}
}
