package ucx

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/rdma"
)

func pair(t *testing.T, opts ...Option) (a, b *node) {
	t.Helper()
	net := newFakeNet()
	a, b = startNode(t, newFake(t, net, opts...)), startNode(t, newFake(t, net, opts...))
	a.register(t, b)
	return a, b
}

// Hostile AMs on a live endpoint (no incarnation, a bad ping, a frame
// over our eager max) are dropped and counted; frames after them arrive.
func TestMalformedAMsAreDroppedAndCounted(t *testing.T) {
	a, b := pair(t)
	raw := a.tr.fake()
	ep, err := raw.Connect(b.tr.local.workerAddr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	send := func(kind uint8, h, d []byte) {
		if err := raw.SendAM(ep, AMIDBase+uint16(kind), h, d, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	send(uint8(ext.Message), []byte{1, 2, 3}, nil)                      // no incarnation
	send(kindPing, appendFrameHeader(nil, 7, []byte{1}), nil)           // short token
	send(kindHello, appendFrameHeader(nil, 7, nil), []byte{0x95, 0x02}) // truncated entry
	send(uint8(ext.Event), appendFrameHeader(nil, 7, nil), make([]byte, DefaultEagerMax+1))
	if s := b.tr.Stats(); s.Malformed != 3 || s.TooLarge != 1 {
		t.Fatalf("stats %+v, want 3 malformed and 1 too large", s)
	}
	raw.CloseEndpoint(ep)
	sendOne(t, a, b)
}

// The limit to a peer is the smaller eager max of the two; a frame over
// it is refused at Send with a FrameTooLargeError naming it.
func TestEagerMaxIsPerPeer(t *testing.T) {
	net := newFakeNet()
	a := startNode(t, newFake(t, net, WithEagerMax(4<<20)))
	b := startNode(t, newFake(t, net))
	a.register(t, b)
	_, err := a.tr.Send(b.id, ext.Frame{Type: ext.Message, Payload: make([]byte, 2<<20)})
	var tl *ext.FrameTooLargeError
	if !errors.As(err, &tl) || tl.Max != DefaultEagerMax {
		t.Fatalf("2 MiB to a 1 MiB peer: %v", err)
	}
	if a.tr.MaxMessageSize() != 4<<20 {
		t.Fatalf("MaxMessageSize %d", a.tr.MaxMessageSize())
	}
	if _, err := New(WithEagerMax(MaxEagerMax + 1)); err == nil || errors.Is(err, ErrNotBuilt) {
		t.Fatalf("an eager max over 16 MiB: %v", err)
	}
}

// A version-1 peer is refused at Register, naming both versions.
func TestRegisterRefusesVersion1(t *testing.T) {
	a, b := pair(t)
	v1 := b.tr.local
	v1.v = 1
	err := a.tr.Register(ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{Key: v1.encode()}})
	if !errors.Is(err, ErrVersionMismatch) || !errors.Is(err, ErrInvalidEndpoint) {
		t.Fatalf("register of a v1 peer: %v", err)
	}
	if err := a.tr.Register(ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{"tcp": []byte("x")}}); !errors.Is(err, ext.ErrNoEndpoint) {
		t.Fatalf("register without a ucx entry: %v", err)
	}
}

// A health check is answered by a peer that never registered us (it
// answers through the endpoint our hello told it about), and fails with
// ErrPeerUnreachable once the peer died.
func TestCheckHealth(t *testing.T) {
	a, b := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.tr.CheckHealth(ctx, b.id); err != nil {
		t.Fatalf("health of a live peer: %v", err)
	}
	b.tr.fake().kill()
	if err := a.tr.CheckHealth(ctx, b.id); !errors.Is(err, ext.ErrPeerUnreachable) {
		t.Fatalf("health of a dead peer: %v", err)
	}
	if err := a.tr.CheckHealth(ctx, ext.NewInstanceID()); !errors.Is(err, ext.ErrPeerNotRegistered) {
		t.Fatalf("health of an unknown peer: %v", err)
	}
}

// A GET between two transports: the owner maps memory, the consumer reads
// it through its endpoint to the owner. Reachable is the registration.
func TestRDMAGet(t *testing.T) {
	a, b := pair(t)
	be := a.tr.RDMA()
	if be.Name() != "ucx" || !be.Reachable(b.id.WorkerID()) || be.Reachable(ext.NewInstanceID().WorkerID()) {
		t.Fatal("Name or Reachable wrong")
	}
	mem := []byte("0123456789abcdef")
	m, err := b.tr.RDMA().Map(unsafe.Pointer(&mem[0]), len(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	key, _ := m.PackKey()
	base, n := m.EffectiveRange()
	if n != len(mem) {
		t.Fatalf("range %d", n)
	}
	ctx := context.Background()
	dst := make([]byte, 6)
	if err := be.Get(ctx, b.id.WorkerID(), uint64(base)+10, key, dst); err != nil || string(dst) != "abcdef" {
		t.Fatalf("GET: %q, %v", dst, err)
	}
	for name, get := range map[string]func() error{
		"unregistered owner": func() error { return be.Get(ctx, ext.NewInstanceID().WorkerID(), uint64(base), key, dst) },
		"bad key":            func() error { return be.Get(ctx, b.id.WorkerID(), uint64(base), []byte("nope"), dst) },
		"cancelled": func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return be.Get(c, b.id.WorkerID(), uint64(base), key, dst)
		},
	} {
		if err := get(); !errors.Is(err, rdma.ErrGetFailed) {
			t.Errorf("%s: %v, want ErrGetFailed", name, err)
		}
	}
	b.tr.fake().kill()
	if err := be.Get(ctx, b.id.WorkerID(), uint64(base), key, dst); !errors.Is(err, rdma.ErrGetFailed) {
		t.Fatalf("GET from a dead owner: %v", err)
	}
}

// Without the ucx build tag, New says so.
func TestNewWithoutTag(t *testing.T) {
	if !builtWithUCX {
		if _, err := New(); !errors.Is(err, ErrNotBuilt) {
			t.Fatalf("New without -tags ucx: %v", err)
		}
	}
}
