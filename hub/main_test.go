package hub

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/velo-go/velo/internal/embedded"
	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// hub a test starts is shut down, and its listeners, loops and tasks must
// be joined by then. The embedded etcd that the etcd tests share starts
// on first use and stops before the leak check.
func TestMain(m *testing.M) {
	code := m.Run()
	stopEtcd()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var etcdOnce struct {
	sync.Once
	srv *embedded.Etcd
	dir string
	err error
}

// etcdEndpoint starts the package's embedded etcd once and returns its
// endpoint; tests keep apart by prefix.
func etcdEndpoint(t *testing.T) string {
	t.Helper()
	etcdOnce.Do(func() {
		etcdOnce.dir, etcdOnce.err = os.MkdirTemp("", "velo-hub-etcd-*")
		if etcdOnce.err == nil {
			etcdOnce.srv, etcdOnce.err = embedded.StartEtcd(etcdOnce.dir)
		}
	})
	if etcdOnce.err != nil {
		t.Fatal(etcdOnce.err)
	}
	return etcdOnce.srv.Endpoint()
}

func stopEtcd() {
	if etcdOnce.srv != nil {
		etcdOnce.srv.Stop()
	}
	if etcdOnce.dir != "" {
		os.RemoveAll(etcdOnce.dir)
	}
}
