package rendezvous_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/transport/sim"
)

// simSide is a messenger over the simulated fabric with a rendezvous
// manager on the RDMA path: all of it runs on the bubble's clock.
type simSide struct {
	m   *messenger.Messenger
	rv  *rendezvous.Manager
	reg *rdma.Registry
	be  *rdmatest.Backend
	met *prometheus.Registry
}

func newSimSide(t *testing.T, net *sim.Net, name string, lease time.Duration) *simSide {
	t.Helper()
	pm := prometheus.NewRegistry()
	vm, err := metrics.Register(pm)
	if err != nil {
		t.Fatal(err)
	}
	m, err := messenger.New(context.Background(), messenger.Config{Transports: []ext.Transport{sim.New(net, sim.WithName(name))}, Metrics: vm})
	if err != nil {
		t.Fatal(err)
	}
	be := rdmatest.New()
	be.SetSelf(m.WorkerID())
	reg := rdma.NewRegistry(be, rdma.Config{Pool: testPool}, vm.Rendezvous())
	rv, err := rendezvous.New(m, rendezvous.Config{Metrics: vm, Registry: reg, RDMA: rendezvous.RdmaRendezvousConfig{LeaseTimeout: lease}})
	if err != nil {
		t.Fatal(err)
	}
	msgrx.SetStager(m, rv)
	return &simSide{m: m, rv: rv, reg: reg, be: be, met: pm}
}

func (s *simSide) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.rv.DemotePinned()
	_ = s.reg.Shutdown(ctx)
	s.m.Shutdown(ctx)
	s.rv.Close()
}

// A GET that takes ten lease timeouts keeps its lease: the consumer
// renews it every half timeout on the bubble's clock, and the owner's
// reaper, which runs all along, reaps nothing; once the GET is done the
// renewals stop, and the lease, left held by Get, is reaped after it.
func TestRDMARenewalOnTheVirtualClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 100 * time.Millisecond
		owner, consumer, stop := simPair(t, lease)
		defer stop()
		want := pattern(1 << 20)
		h := owner.rv.RegisterDataPinned(want)
		owner.be.BlockGets()
		done := make(chan []byte)
		go func() {
			b, _, err := consumer.rv.Get(context.Background(), h)
			if err != nil {
				t.Error(err)
			}
			done <- b
		}()
		waitParked(owner.be)
		start := time.Now()
		time.Sleep(10 * lease)
		synctest.Wait()
		renews := opCount(owner.met, "renew")
		if renews < 19 || reaped(owner.met) != 0 || owner.rv.View().Leases != 1 {
			t.Fatalf("after %v: %v renewals, %v reaped, %d leases", time.Since(start), renews, reaped(owner.met), owner.rv.View().Leases)
		}
		owner.be.ReleaseGets()
		if b := <-done; !bytes.Equal(b, want) {
			t.Fatal("other bytes")
		}
		after := opCount(owner.met, "renew")
		time.Sleep(lease + lease/2 + time.Millisecond)
		synctest.Wait()
		if opCount(owner.met, "renew") != after || reaped(owner.met) != 1 {
			t.Fatalf("after the GET: %v more renewals, %v reaped; want none and 1", opCount(owner.met, "renew")-after, reaped(owner.met))
		}
	})
}

// simPair is an owner (RDMA lease timeout lease) and a consumer on one
// fabric, known to each other; stop closes them in order.
func simPair(t *testing.T, lease time.Duration) (owner, consumer *simSide, stop func()) {
	t.Helper()
	net := sim.NewNet(sim.Config{Seed: 1, Latency: 50 * time.Microsecond})
	net.Run()
	owner = newSimSide(t, net, "owner", lease)
	consumer = newSimSide(t, net, "consumer", 0)
	if err := owner.m.RegisterPeer(consumer.m.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := consumer.m.RegisterPeer(owner.m.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	consumer.be.SetReachable(owner.m.WorkerID(), true)
	return owner, consumer, func() {
		consumer.close()
		owner.close()
		net.Close()
	}
}

// waitParked lets the virtual clock run until a GET is parked on be: the
// handshake and the acquire cross the fabric first.
func waitParked(be *rdmatest.Backend) {
	for be.Parked() == 0 {
		time.Sleep(time.Millisecond)
	}
}

// GetInto whose context ends while its GET writes into the caller's
// buffer does not return until the backend is done with the buffer; it
// then fails with the context's error and detaches the lease.
func TestRDMAGetIntoWaitsForItsBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		owner, consumer, stop := simPair(t, time.Second)
		defer stop()
		want := pattern(1 << 20)
		h := owner.rv.RegisterDataPinned(want)
		owner.be.BlockGets()
		ctx, cancel := context.WithCancel(context.Background())
		buf := make([]byte, len(want))
		res := make(chan error)
		go func() { _, _, err := consumer.rv.GetInto(ctx, h, buf); res <- err }()
		waitParked(owner.be)
		cancel()
		time.Sleep(10 * time.Second) // the GET stays parked for ten virtual seconds
		synctest.Wait()
		select {
		case err := <-res:
			t.Fatalf("GetInto returned (%v) while its GET still held the buffer", err)
		default:
		}
		owner.be.ReleaseGets()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("GetInto: %v, want context.Canceled", err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatal("the buffer does not hold what the GET wrote")
		}
		for owner.rv.View().Leases != 0 {
			time.Sleep(time.Millisecond)
		}
	})
}
