package rdmapath

import (
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo/metrics"
)

type fakeBackend struct{ draining bool }

func (b *fakeBackend) Name() string   { return BackendNameUCX }
func (b *fakeBackend) Draining() bool { return b.draining }

type fakeRegion struct {
	d   Descriptor
	err error
}

func (r fakeRegion) Descriptor() (Descriptor, error) { return r.d, r.err }

const slotLen = 1 << 20

func goodRegion() fakeRegion {
	return fakeRegion{d: Descriptor{Backend: BackendUCX, Generation: 2, Addr: 0x10000, Len: slotLen, Rkey: []byte{9, 9}}}
}

// world is one acquire's facts; each case below breaks some of them.
type world struct {
	offer    *Offer
	backend  bool
	disabled bool
	region   Region
	len      uint64
	draining bool
}

func allGood() world {
	return world{offer: &Offer{Backends: []string{"ucx"}}, backend: true, region: goodRegion(), len: slotLen}
}

func (w world) decide(dst []byte) ([]byte, Reason) {
	o := Owner{Disabled: w.disabled, MinBytes: DefaultMinBytes}
	if w.backend {
		o.Backend = &fakeBackend{draining: w.draining}
	}
	return o.Decide(w.offer, SlotFacts{Len: w.len, Region: w.region}, dst)
}

// Each check refuses with its label, and a descriptor that fails two
// checks reports the first of them in the book's order.
func TestOwnerChecks(t *testing.T) {
	noOffer := func(w *world) { w.offer = nil }
	noBackend := func(w *world) { w.backend = false }
	kill := func(w *world) { w.disabled = true }
	heap := func(w *world) { w.region = nil }
	small := func(w *world) {
		w.len = DefaultMinBytes - 1
		w.region = fakeRegion{d: Descriptor{Backend: 1, Addr: 1, Len: DefaultMinBytes - 1, Rkey: []byte{1}}}
	}
	otherBackend := func(w *world) { w.offer = &Offer{Backends: []string{"nixl"}} }
	drain := func(w *world) { w.draining = true }
	gone := func(w *world) { w.region = fakeRegion{err: errors.New("deregistered")} }
	cases := []struct {
		name string
		mods []func(*world)
		want Reason
	}{
		{"all pass", nil, metrics.RdmaOK},
		{"1 no offer", []func(*world){noOffer}, metrics.RdmaNoOffer},
		{"2 no registry", []func(*world){noBackend}, metrics.RdmaNotConfigured},
		{"3 kill switch", []func(*world){kill}, metrics.RdmaKillSwitch},
		{"4 plain memory", []func(*world){heap}, metrics.RdmaNotPinned},
		{"5 below min", []func(*world){small}, metrics.RdmaBelowMin},
		{"6 offer names another backend", []func(*world){otherBackend}, metrics.RdmaNoOffer},
		{"6 empty offer", []func(*world){func(w *world) { w.offer = &Offer{} }}, metrics.RdmaNoOffer},
		{"7 draining", []func(*world){drain}, metrics.RdmaDraining},
		{"8 staging gone", []func(*world){gone}, metrics.RdmaNotPinned},
		{"8 descriptor disagrees with the slot", []func(*world){func(w *world) {
			r := goodRegion()
			r.d.Len--
			w.region = r
		}}, metrics.RdmaNotPinned},
		{"8 descriptor does not encode", []func(*world){func(w *world) {
			r := goodRegion()
			r.d.Rkey = nil
			w.region = r
		}}, metrics.RdmaNotPinned},
		// Orders: the earlier check wins.
		{"1 before 2", []func(*world){noOffer, noBackend}, metrics.RdmaNoOffer},
		{"2 before 3", []func(*world){noBackend, kill}, metrics.RdmaNotConfigured},
		{"3 before 4", []func(*world){kill, heap}, metrics.RdmaKillSwitch},
		{"4 before 5", []func(*world){small, heap}, metrics.RdmaNotPinned},
		{"5 before 6", []func(*world){small, otherBackend}, metrics.RdmaBelowMin},
		{"6 before 7", []func(*world){otherBackend, drain}, metrics.RdmaNoOffer},
		{"7 before 8", []func(*world){drain, gone}, metrics.RdmaDraining},
		{"a heap slot on a draining owner is not_pinned", []func(*world){drain, heap}, metrics.RdmaNotPinned},
		{"kill switch on a draining owner", []func(*world){drain, kill}, metrics.RdmaKillSwitch},
	}
	for _, c := range cases {
		w := allGood()
		for _, m := range c.mods {
			m(&w)
		}
		out, why := w.decide([]byte{0xee})
		if why != c.want {
			t.Errorf("%s: reason %s, want %s", c.name, why, c.want)
		}
		if why != metrics.RdmaOK && len(out) != 1 {
			t.Errorf("%s: refused but wrote %x", c.name, out)
		}
	}
}

// What the owner sends on ok is the region's descriptor, encoded after dst.
func TestOwnerDescriptor(t *testing.T) {
	out, why := allGood().decide([]byte{0xee})
	if why != metrics.RdmaOK || out[0] != 0xee {
		t.Fatalf("%s %x", why, out)
	}
	d, err := Decode(out[1:])
	r := goodRegion()
	if err != nil || d.Addr != r.d.Addr || d.Len != slotLen || d.Generation != r.d.Generation || string(d.Rkey) != string(r.d.Rkey) {
		t.Fatalf("Decode = %+v, %v", d, err)
	}
	// The threshold is inclusive: a payload of exactly rdma_min_bytes takes RDMA.
	w := allGood()
	w.len = DefaultMinBytes
	w.region = fakeRegion{d: Descriptor{Backend: 1, Addr: 1, Len: DefaultMinBytes, Rkey: []byte{1}}}
	if _, why := w.decide(nil); why != metrics.RdmaOK {
		t.Errorf("len == rdma_min_bytes: %s", why)
	}
}

// The zero Owner is this build's owner: every decision is chunked.
func TestZeroOwnerIsChunked(t *testing.T) {
	var o Owner
	if _, why := o.Decide(nil, SlotFacts{Len: slotLen}, nil); why != metrics.RdmaNoOffer {
		t.Errorf("no offer: %s", why)
	}
	if _, why := o.Decide(&Offer{Backends: []string{"ucx"}}, SlotFacts{Len: slotLen, Region: goodRegion()}, nil); why != metrics.RdmaNotConfigured {
		t.Errorf("an offer to an owner with no registry: %s", why)
	}
}

func TestLeaseTimes(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{{0, time.Millisecond}, {time.Microsecond, time.Millisecond}, {time.Second, time.Second}} {
		if got := ClampLeaseTimeout(c.in); got != c.want {
			t.Errorf("ClampLeaseTimeout(%v) = %v", c.in, got)
		}
	}
	for _, c := range []struct{ in, want time.Duration }{{DefaultLeaseTimeout, 15 * time.Second}, {time.Millisecond, 10 * time.Millisecond}} {
		if got := ReapEvery(c.in); got != c.want {
			t.Errorf("ReapEvery(%v) = %v", c.in, got)
		}
	}
	for _, c := range []struct {
		ms   uint64
		want time.Duration
	}{{0, 0}, {1, 5 * time.Millisecond}, {30000, 15 * time.Second}, {^uint64(0), time.Duration(1<<63-1) / time.Millisecond * time.Millisecond / 2}} {
		if got := RenewEvery(c.ms); got != c.want {
			t.Errorf("RenewEvery(%d) = %v, want %v", c.ms, got, c.want)
		}
	}
}
