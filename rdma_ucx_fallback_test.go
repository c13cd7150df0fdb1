//go:build ucx

package velo_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/velo-go/velo/internal/rdma"
	iucx "github.com/velo-go/velo/internal/ucx"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous"
)

// truncating registers memory with the real backend and hands out each
// key one byte short. The binding's framing check refuses such a key
// before UCX unpacks it. (A well-framed key for memory that is gone would
// reach UCX, which on InfiniBand aborts the process: not a test to run.)
type truncating struct{ rdma.Backend }

func (b truncating) Map(base unsafe.Pointer, n int) (rdma.Mapping, error) {
	m, err := b.Backend.Map(base, n)
	if err != nil {
		return nil, err
	}
	return truncatedKeys{m}, nil
}

type truncatedKeys struct{ rdma.Mapping }

func (m truncatedKeys) PackKey() ([]byte, error) {
	k, err := m.Mapping.PackKey()
	if err != nil || len(k) == 0 {
		return k, err
	}
	return k[:len(k)-1], nil
}

// Over real UCX, a GET that fails falls back to chunks exactly once: the
// owner's keys are cut short, so the consumer's GET is refused by the
// binding's key check; the consumer records get_failed once and acquires
// again with no offer, the owner answers that acquire chunked (no_offer),
// and the bytes arrive whole. Neither side counts an RDMA transfer the
// consumer did not make.
func TestRDMAGetFailureFallsBackOnceOverUCX(t *testing.T) {
	ou, err := newUCX()
	if err != nil {
		t.Fatal(err)
	}
	cu, err := newUCX()
	if err != nil {
		t.Fatal(err)
	}
	be := watch(cu.RDMA())
	owner, om := rdmaNode(t, ucxRDMA{ou, truncating{ou.RDMA()}})
	consumer, cm := rdmaNode(t, ucxRDMA{cu, be})
	knowEachOther(t, owner, consumer)

	want := bytes.Repeat([]byte("fallback once..."), 8<<20/16)
	h := owner.Rendezvous.RegisterDataPinned(want)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, lease, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if err := consumer.Rendezvous.Release(ctx, h, lease); err != nil {
		t.Fatal(err)
	}

	ans := be.answers()
	if len(ans) != 1 || !errors.Is(ans[0], rdma.ErrGetFailed) || !errors.Is(ans[0], iucx.ErrBadRkey) {
		t.Fatalf("the consumer's GETs answered %v, want one refused by the key check (ErrBadRkey)", ans)
	}
	for _, c := range []struct {
		side   string
		v      float64
		want   float64
		reason metrics.RdmaPathReason
	}{
		{"consumer", path(cm, metrics.RdmaGetFailed), 1, metrics.RdmaGetFailed},
		{"consumer", path(cm, metrics.RdmaOK), 0, metrics.RdmaOK},
		{"owner", path(om, metrics.RdmaOK), 1, metrics.RdmaOK}, // the first answer, a descriptor
		{"owner", path(om, metrics.RdmaNoOffer), 1, metrics.RdmaNoOffer},
	} {
		if c.v != c.want {
			t.Errorf("%s: %s/%s = %v, want %v", c.side, c.reason.Path(), c.reason, c.v, c.want)
		}
	}
	acq := counter(om, "velo_rendezvous_operations_total", map[string]string{"operation": "acquire", "outcome": "success"})
	if acq != 2 {
		t.Errorf("the owner answered %v acquires, want 2 (the offer, then the fallback)", acq)
	}
}

// After the consumer releases its only reference, the owner has freed the
// slot and its registered staging: a second Get of the same handle is
// refused at the acquire as not found, before any descriptor exists, so
// no GET is posted. (The consumer cannot send a descriptor back: each
// answer is a one-GET grant, and the owner checks the slot again at every
// acquire.)
func TestRDMAGetAfterReleaseIsNotFoundOverUCX(t *testing.T) {
	ou, err := newUCX()
	if err != nil {
		t.Fatal(err)
	}
	cu, err := newUCX()
	if err != nil {
		t.Fatal(err)
	}
	be := watch(cu.RDMA())
	owner, om := rdmaNode(t, ou)
	consumer, cm := rdmaNode(t, ucxRDMA{cu, be})
	knowEachOther(t, owner, consumer)

	want := bytes.Repeat([]byte("released"), 1<<20/8)
	h := owner.Rendezvous.RegisterDataPinned(want)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, lease, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if v := path(cm, metrics.RdmaOK); v != 1 {
		t.Fatalf("the first get did not take the RDMA path: rdma/ok = %v (get_failed %v)", v, path(cm, metrics.RdmaGetFailed))
	}
	if err := consumer.Rendezvous.Release(ctx, h, lease); err != nil {
		t.Fatal(err)
	}
	// The release is fire-and-forget: wait until the owner has freed the slot.
	for _, slots := owner.Rendezvous.HeldBytes(); slots != 0; _, slots = owner.Rendezvous.HeldBytes() {
		if ctx.Err() != nil {
			t.Fatalf("the owner still holds %d slots", slots)
		}
		time.Sleep(time.Millisecond)
	}

	_, _, err = consumer.Rendezvous.Get(ctx, h)
	if !errors.Is(err, rendezvous.ErrNotFound) {
		t.Fatalf("get after release: %v, want ErrNotFound", err)
	}
	if n := len(be.answers()); n != 1 {
		t.Errorf("%d GETs posted, want only the first get's", n)
	}
	if v := counter(om, "velo_rendezvous_refusals_total", map[string]string{"operation": "acquire", "reason": "not_found"}); v != 1 {
		t.Errorf("the owner refused %v acquires as not found, want 1", v)
	}
	if v := path(om, metrics.RdmaOK); v != 1 {
		t.Errorf("owner: rdma/ok = %v, want 1 (no descriptor for the second acquire)", v)
	}
	if v := path(cm, metrics.RdmaGetFailed); v != 0 {
		t.Errorf("consumer: get_failed = %v, want 0", v)
	}
}
