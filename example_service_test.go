package velo_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/discovery/fs"
	"github.com/velo-go/velo/transport/tcp"
)

// serviceNode starts a node that publishes itself, and finds others, in
// the discovery folder dir (the filesystem backend; etcd and NATS work the
// same way).
func serviceNode(ctx context.Context, dir string, opts ...velo.Option) *velo.Node {
	tr, err := tcp.New()
	if err != nil {
		log.Fatal(err)
	}
	opts = append(opts,
		velo.WithTransport(tr),
		velo.WithDiscovery(fs.NewPeers(filepath.Join(dir, "peers.json"))),
		velo.WithServiceDiscovery(fs.NewServices(filepath.Join(dir, "services.json"))))
	n, err := velo.New(ctx, opts...)
	if err != nil {
		log.Fatal(err)
	}
	return n
}

// A caller names a service, not an instance: two workers register as
// "greeter", and the caller's calls to velo.Service("greeter") take them
// in turn (round-robin; WithServicePicker(velo.LeastOutstanding) picks the
// least busy). A service with no live instance fails with ErrNoInstance.
func ExampleService() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "velo-example-*")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	answered := map[string]bool{}
	for _, name := range []string{"ann", "bob"} {
		worker := serviceNode(ctx, dir)
		defer worker.Shutdown(ctx)
		worker.Register(velo.UnaryHandler("hello", func(c *velo.Context) ([]byte, error) {
			return []byte(name), nil
		}))
		if err := worker.RegisterService(ctx, "greeter"); err != nil {
			log.Fatal(err)
		}
	}

	caller := serviceNode(ctx, dir)
	defer caller.Shutdown(ctx)
	for range 4 {
		who, err := caller.Unary(ctx, velo.Service("greeter"), "hello", nil)
		if err != nil {
			log.Fatal(err)
		}
		answered[string(who)] = true
	}
	fmt.Println("answered by:", len(answered), "workers")

	_, err = caller.Unary(ctx, velo.Service("nobody"), "hello", nil)
	fmt.Println(errors.Is(err, velo.ErrNoInstance), err)
	// Output:
	// answered by: 2 workers
	// true velo: no live instance of service "nobody": none registered
}
