package client_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/velo-go/velo/internal/embedded"
	"go.uber.org/goleak"
)

// TestMain runs a node process when the must-show test re-executes this
// binary as one (nodeProcessEnv). Otherwise it runs the tests, stops the
// embedded etcd if one started, and fails the package when a test left a
// goroutine behind: each client's loop and watch streams must end at its
// last Close.
func TestMain(m *testing.M) {
	if os.Getenv(nodeProcessEnv) != "" {
		os.Exit(nodeProcess())
	}
	code := m.Run()
	if etcdSrv != nil {
		etcdSrv.Stop()
		os.RemoveAll(etcdDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	etcdOnce sync.Once
	etcdSrv  *embedded.Etcd
	etcdDir  string
	etcdErr  error
)

// etcdEndpoint starts one embedded etcd for the tests that need it, on
// free ports; tests keep apart by prefix.
func etcdEndpoint(t *testing.T) string {
	t.Helper()
	etcdOnce.Do(func() {
		etcdDir, etcdErr = os.MkdirTemp("", "velo-hubclient-etcd-*")
		if etcdErr == nil {
			etcdSrv, etcdErr = embedded.StartEtcd(etcdDir)
		}
	})
	if etcdErr != nil {
		t.Fatal(etcdErr)
	}
	return etcdSrv.Endpoint()
}
