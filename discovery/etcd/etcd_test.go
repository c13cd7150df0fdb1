package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/discovery/discoverytest"
	"github.com/velo-go/velo/discovery/etcd"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/embedded"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// endpoint is the embedded etcd that every test of the package shares;
// tests keep apart by cluster name or by fresh ids.
var endpoint string

func TestMain(m *testing.M) {
	discoverytest.ServeWorkerIfChild(func(addr string) (ext.PeerDiscovery, ext.ServiceDiscovery, error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		d := etcd.New(cli, "test", etcd.WithLeaseTTL(time.Second))
		return d, d, nil
	})
	if os.Getenv(discoverytest.ChildEnv) != "" {
		discoverytest.RunChild(registerInChild)
		return
	}
	dir, err := os.MkdirTemp("", "velo-etcd-*")
	if err != nil {
		panic(err)
	}
	srv, err := embedded.StartEtcd(dir)
	if err != nil {
		panic(err)
	}
	endpoint = srv.Endpoint()
	code := m.Run()
	srv.Stop()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// client opens a client of its own, as a process has.
func client(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func open(t *testing.T) *etcd.Discovery {
	return etcd.New(client(t), "test", etcd.WithLeaseTTL(time.Second))
}

func TestPeerConformance(t *testing.T) {
	discoverytest.RunPeer(t, func(t *testing.T) ext.PeerDiscovery { return open(t) })
}

func TestServiceConformance(t *testing.T) {
	discoverytest.RunService(t, func(t *testing.T) ext.ServiceDiscovery { return open(t) })
}

func TestThreeNodesFindEachOther(t *testing.T) {
	discoverytest.RunNodes(t, func(t *testing.T) ext.PeerDiscovery { return open(t) })
}

// TestKeysGolden pins the keys and bodies: the service key and value of
// the reference, and our peer keys.
func TestKeysGolden(t *testing.T) {
	cli := client(t)
	d := etcd.New(cli, "golden", etcd.WithLeaseTTL(time.Second))
	id, _ := ext.ParseInstanceID("6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8")
	info := ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{"tcp": []byte("h:1")}}
	ctx := t.Context()
	if err := d.RegisterService(ctx, "rhino-router", id); err != nil {
		t.Fatal(err)
	}
	if err := d.Register(ctx, info); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/velo/golden/services/rhino-router/6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8": "6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8",
		"/velo/golden/peers/instance/6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8":        `{"instance_id":"6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8","worker_address":[129,163,116,99,112,147,104,58,49]}`,
		"/velo/golden/peers/worker/12787630856952281325":                          "6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8",
	}
	resp, err := cli.Get(ctx, "/velo/golden/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != len(want) {
		t.Fatalf("%d keys, want %d: %v", len(resp.Kvs), len(want), resp.Kvs)
	}
	for _, kv := range resp.Kvs {
		if want[string(kv.Key)] != string(kv.Value) {
			t.Errorf("%s = %s, want %s", kv.Key, kv.Value, want[string(kv.Key)])
		}
		if kv.Lease == 0 {
			t.Errorf("%s has no lease", kv.Key)
		}
	}
	d.Unregister(ctx, id)
	d.UnregisterService(ctx, "rhino-router", id)
}

// TestGuardRevokesLease: the guard's Unregister revokes the lease itself,
// not only the keys.
func TestGuardRevokesLease(t *testing.T) {
	cli := client(t)
	d := etcd.New(cli, "test", etcd.WithLeaseTTL(time.Second))
	info := discoverytest.NewPeer()
	g, err := d.RegisterPeer(t.Context(), info)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(t.Context(), "/velo/test/peers/instance/"+info.InstanceID.String())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get: %v, %v", resp, err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if err := g.Unregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	ttl, err := cli.TimeToLive(t.Context(), lease)
	if err != nil || ttl.TTL != -1 {
		t.Fatalf("lease after unregister: %+v, %v (want TTL -1: gone)", ttl, err)
	}
}

// TestKilledNodeVanishesWithinTTL: a process that dies (its client closes
// without revoking) leaves its keys until the lease expires. The test
// measures the time from the death to the first lookup that fails, and
// checks that the entry outlived most of the TTL (no revoke happened) and
// went by TTL plus etcd's expiry sweep (500 ms) plus room for a busy
// machine.
func TestKilledNodeVanishesWithinTTL(t *testing.T) {
	const ttl = time.Second
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	info := discoverytest.NewPeer()
	if err := etcd.New(cli, "test", etcd.WithLeaseTTL(ttl)).Register(t.Context(), info); err != nil {
		t.Fatal(err)
	}
	took := discoverytest.MeasureVanish(t, open(t), info, func() { cli.Close() }, 5*ttl)
	t.Logf("a killed node's entry vanished %v after its death (lease TTL %v)", took, ttl)
	if took < ttl/2 || took > ttl+time.Second {
		t.Fatalf("vanished after %v; want about the TTL %v", took, ttl)
	}
}

// TestRegistrationLossFailsCallsInFlight: node B's discovery client dies
// while A waits on a call to B (B's transport is still up). When B's lease
// expires, A's watch sees the key go and the call fails with
// ErrPeerUnreachable; the next call to B finds nothing.
func TestRegistrationLossFailsCallsInFlight(t *testing.T) {
	a := discoverytest.StartNode(t, open(t))
	bcli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	b := discoverytest.StartNode(t, etcd.New(bcli, "test", etcd.WithLeaseTTL(time.Second)))
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	err = b.Register(velo.UnaryHandler("hang", func(*velo.Context) ([]byte, error) {
		close(entered)
		<-release
		return nil, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := a.Unary(ctx, b.InstanceID(), "hang", nil); done <- err }()
	<-entered // the call is in flight on B
	start := time.Now()
	bcli.Close() // B's registration now lives only until its lease expires
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the call did not fail")
	}
	if !errors.Is(err, velo.ErrPeerUnreachable) {
		t.Fatalf("call failed with %v, want ErrPeerUnreachable", err)
	}
	t.Logf("call in flight failed %v after B's discovery client died: %v", time.Since(start), err)
	if _, err := a.Unary(ctx, b.InstanceID(), "hang", nil); !errors.Is(err, ext.ErrPeerNotFound) {
		t.Fatalf("next call: %v, want ErrPeerNotFound", err)
	}
}

// registerInChild registers info with a 1 s lease, for a child process.
func registerInChild(addr string, info ext.PeerInfo) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return etcd.New(cli, "test", etcd.WithLeaseTTL(time.Second)).Register(ctx, info)
}

// TestKilledProcessVanishesWithinTTL: a child process registers with a
// 1 s lease and is killed with SIGKILL. Its entry stays until the lease
// expires, then goes: the test reports how long that took.
func TestKilledProcessVanishesWithinTTL(t *testing.T) {
	const ttl = time.Second
	info, kill := discoverytest.StartChild(t, endpoint)
	took := discoverytest.MeasureVanish(t, open(t), info, kill, 5*ttl)
	t.Logf("a SIGKILLed process's entry vanished %v after the kill (lease TTL %v)", took, ttl)
	if took < ttl/2 || took > ttl+time.Second {
		t.Fatalf("vanished after %v; want about the TTL %v", took, ttl)
	}
}

// TestServiceKill: three worker processes serve one service, one is
// SIGKILLed under load; calls by service name go on on the two left,
// long before its lease expires.
func TestServiceKill(t *testing.T) {
	discoverytest.RunServiceKill(t, endpoint, func(string) (ext.PeerDiscovery, ext.ServiceDiscovery, error) {
		d := open(t)
		return d, d, nil
	})
}
