package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{etcdEndpoint(t)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

var etcdPrefixes atomic.Int64

func etcdPrefix() string {
	return fmt.Sprintf("/velo-hub/hubtest-%d-%d", os.Getpid(), etcdPrefixes.Add(1))
}

// openEtcd opens the prefix with a one-second lock lease, so a crashed
// hub's lock expires quickly.
func openEtcd(t *testing.T, cli *clientv3.Client, prefix string) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := etcdstore.New(ctx, cli, etcdstore.WithPrefix(prefix), etcdstore.WithLockTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func serveOn(t *testing.T, st store.Store, opts ...Option) *Hub {
	t.Helper()
	h, err := New(testConfig(), append([]Option{WithStore(st)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	return h
}

func stopHub(t *testing.T, h *Hub) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = h.Shutdown(ctx) // a crashed hub's store answers errors: not the test's point
	if ctx.Err() != nil {
		t.Fatal("the hub did not stop")
	}
}

// TestEtcdRestartRecovers: hub A on etcd holds a registration and stops
// without unregistering it, cleanly or as in a crash (its etcd client
// gone, so it frees neither its lock nor its pinned entry). Hub B on the
// same prefix, once WaitForPrefix says the lock is free, answers
// recovered to the credential; a registration presenting it succeeds
// with recovered: true and a new credential, and the old credential is
// then refused. After the crash, B drops A's pinned entry.
func TestEtcdRestartRecovers(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "clean stop"
		if crash {
			name = "crash"
		}
		t.Run(name, func(t *testing.T) {
			prefix := etcdPrefix()
			cliA := etcdClient(t)
			reg := startRegistrant(t)
			a := serveOn(t, openEtcd(t, cliA, prefix), veloTCP(t))
			aPinned := a.Node().InstanceID()
			p := reg.node.PeerInfo()
			r1 := register(t, a, p, "", svc("db"))
			if crash {
				cliA.Close()
			}
			stopHub(t, a)

			cliB := etcdClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := etcdstore.WaitForPrefix(ctx, cliB, prefix); err != nil {
				t.Fatalf("WaitForPrefix: %v", err)
			}
			b := serveOn(t, openEtcd(t, cliB, prefix), veloTCP(t))
			defer stopHub(t, b)
			if _, ok := b.Store().Get(aPinned); ok {
				t.Fatal("the stopped hub's pinned entry is still stored")
			}
			st, body := call(t, "POST", ctl(b)+protocol.HeartbeatPath(p.InstanceID), nil, r1.Credential)
			wantCode(t, "the old credential on the new hub", st, body, protocol.CodeRecovered, 409)
			r2 := register(t, b, p, r1.Credential, svc("db"))
			if !r2.Recovered || r2.Credential == r1.Credential || r2.Epoch <= r1.Epoch || r2.HubID != b.ID() {
				t.Fatalf("recovery on etcd: %+v (before: epoch %d)", r2, r1.Epoch)
			}
			st, body = call(t, "POST", ctl(b)+protocol.HeartbeatPath(p.InstanceID), nil, r1.Credential)
			wantCode(t, "the old credential after the recovery", st, body, protocol.CodeUnauthorized, 401)
			if st, body := call(t, "POST", ctl(b)+protocol.HeartbeatPath(p.InstanceID), nil, r2.Credential); st != 200 {
				t.Fatalf("the new credential: %d %s", st, body)
			}
			if m := members(t, b, "db"); len(m) != 1 || m[0] != p.InstanceID {
				t.Fatalf("services after the recovery: %v", m)
			}
		})
	}
}

// TestSecondHubOnPrefixIsFenced: while hub A holds a prefix, a second
// store on it is refused (ErrPrefixHeld), so no second hub serves it, and
// A goes on serving. When A loses its lock (its lease gone, as after a
// partition) and B takes the prefix, A's store is Fenced and A stops: its
// listener no longer accepts; B serves the registration as reserved.
func TestSecondHubOnPrefixIsFenced(t *testing.T) {
	prefix := etcdPrefix()
	cliA, cliB := etcdClient(t), etcdClient(t)
	a := serveOn(t, openEtcd(t, cliA, prefix))
	defer stopHub(t, a)
	p := fakePeer()
	r := register(t, a, p, "", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := etcdstore.New(ctx, cliB, etcdstore.WithPrefix(prefix)); !errors.Is(err, etcdstore.ErrPrefixHeld) {
		t.Fatalf("a second store while the first hub runs: %v, want ErrPrefixHeld", err)
	}
	if st, b := call(t, "POST", ctl(a)+protocol.HeartbeatPath(p.InstanceID), nil, r.Credential); st != 200 {
		t.Fatalf("the first hub after a refused second: %d %s", st, b)
	}

	if _, err := cliB.Delete(ctx, prefix+"/lock"); err != nil { // A's lock lease is gone
		t.Fatal(err)
	}
	b := serveOn(t, openEtcd(t, cliB, prefix))
	defer stopHub(t, b)
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the fenced hub did not stop")
	}
	if c, err := net.DialTimeout("tcp", a.ControlAddr().String(), 5*time.Second); err == nil {
		c.Close()
		t.Fatal("the fenced hub still accepts connections")
	}
	st, body := call(t, "POST", ctl(b)+protocol.HeartbeatPath(p.InstanceID), nil, r.Credential)
	wantCode(t, "the credential on the hub that took over", st, body, protocol.CodeRecovered, 409)
}
