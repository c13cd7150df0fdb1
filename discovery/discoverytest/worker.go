package discoverytest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// Environment of a service worker child.
const (
	workerEnv        = "VELO_SERVICE_WORKER"         // the backend's address
	workerServiceEnv = "VELO_SERVICE_WORKER_SERVICE" // the service to register in
)

// Backends opens a peer and a service discovery client of one backend at
// addr, as a process would.
type Backends func(addr string) (ext.PeerDiscovery, ext.ServiceDiscovery, error)

// ServeWorkerIfChild makes this process a service worker when
// StartWorker started it: a velo node that registers in the service it
// was given and answers "who" with its instance id until it is killed. Call it first
// in TestMain; it returns at once in any other process.
func ServeWorkerIfChild(open Backends) {
	addr := os.Getenv(workerEnv)
	if addr == "" {
		return
	}
	id, err := serveWorker(addr, os.Getenv(workerServiceEnv), open)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	fmt.Println("worker", id)
	time.Sleep(time.Minute) // the parent kills it long before
	os.Exit(2)
}

func serveWorker(addr, service string, open Backends) (ext.InstanceID, error) {
	peers, svcs, err := open(addr)
	if err != nil {
		return ext.InstanceID{}, err
	}
	tr, err := tcp.New()
	if err != nil {
		return ext.InstanceID{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	n, err := velo.New(ctx, velo.WithTransport(tr), velo.WithDiscovery(peers), velo.WithServiceDiscovery(svcs))
	if err != nil {
		return ext.InstanceID{}, err
	}
	id := n.InstanceID()
	if err := n.Register(velo.UnaryHandler("who", func(*velo.Context) ([]byte, error) { return []byte(id.String()), nil })); err != nil {
		return id, err
	}
	return id, n.RegisterService(ctx, service)
}

// StartWorker runs this test binary as a service worker on the backend
// at addr, registered in service; it returns once the worker has registered, with its instance
// and a kill function that sends SIGKILL and reaps the process.
func StartWorker(t *testing.T, addr, service string) (ext.InstanceID, func()) {
	t.Helper()
	s, kill := startSelf(t, "worker", workerEnv+"="+addr, workerServiceEnv+"="+service)
	id, err := ext.ParseInstanceID(strings.TrimSpace(strings.TrimPrefix(s, "worker ")))
	if err != nil {
		t.Fatalf("worker said %q", s)
	}
	return id, kill
}
