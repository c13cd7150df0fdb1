package etcdstore_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/etcdstore"
	"github.com/velo-go/velo/hub/store/storetest"
	"github.com/velo-go/velo/internal/embedded"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// endpoint is the embedded etcd every test shares; tests keep apart by
// prefix.
var endpoint string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "velo-hubstore-*")
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

func client(t testing.TB, ep string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

var prefixes atomic.Int64

func freshPrefix() string { return fmt.Sprintf("/velo-hub/test-%d-%d", os.Getpid(), prefixes.Add(1)) }

func open(t testing.TB, cli *clientv3.Client, opts ...etcdstore.Option) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcdstore.New(ctx, cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	cli := client(t, endpoint)
	storetest.Run(t, storetest.Factory{Remote: true, New: func(t testing.TB, o storetest.Options) store.Store {
		return open(t, cli, etcdstore.WithPrefix(freshPrefix()), etcdstore.WithTTL(o.TTL),
			etcdstore.WithClock(o.Now), etcdstore.WithReapInterval(time.Hour))
	}})
}
