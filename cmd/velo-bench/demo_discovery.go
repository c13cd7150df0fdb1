package main

import (
	"fmt"
	"os"
	"time"

	natsgo "github.com/nats-io/nats.go"
	etcddisc "github.com/velo-go/velo/discovery/etcd"
	natsdisc "github.com/velo-go/velo/discovery/nats"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/embedded"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// demoDiscovery is a backend started for the demo: each call of open
// gives a node its own client, as a separate process would have.
type demoDiscovery struct {
	about string
	open  func() (ext.PeerDiscovery, error)
	stop  []func()
}

func (d *demoDiscovery) close() {
	for i := len(d.stop) - 1; i >= 0; i-- {
		d.stop[i]()
	}
}

// startDemoDiscovery starts an embedded server of the kind asked for in a
// temporary directory.
func startDemoDiscovery(kind string) (*demoDiscovery, error) {
	dir, err := os.MkdirTemp("", "velo-demo-*")
	if err != nil {
		return nil, err
	}
	d := &demoDiscovery{stop: []func(){func() { os.RemoveAll(dir) }}}
	switch kind {
	case "nats":
		err = d.startNATS(dir)
	case "etcd":
		err = d.startEtcd(dir)
	default:
		err = fmt.Errorf("unknown discovery %q (want etcd or nats)", kind)
	}
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *demoDiscovery) startNATS(dir string) error {
	srv, err := embedded.StartNATS(dir)
	if err != nil {
		return err
	}
	d.stop = append(d.stop, srv.Stop)
	d.about = "embedded nats-server at " + srv.URL() + ": request/reply on <cluster>.velo.discover.{instance,worker}.<id>"
	d.open = func() (ext.PeerDiscovery, error) {
		nc, err := natsgo.Connect(srv.URL())
		if err != nil {
			return nil, err
		}
		d.stop = append(d.stop, nc.Close)
		return natsdisc.New(nc, "demo"), nil
	}
	return nil
}

func (d *demoDiscovery) startEtcd(dir string) error {
	srv, err := embedded.StartEtcd(dir)
	if err != nil {
		return err
	}
	d.stop = append(d.stop, srv.Stop)
	d.about = "embedded etcd at " + srv.Endpoint() + ": keys /velo/demo/peers/... under 5 s leases"
	d.open = func() (ext.PeerDiscovery, error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		d.stop = append(d.stop, func() { cli.Close() })
		return etcddisc.New(cli, "demo", etcddisc.WithLeaseTTL(5*time.Second)), nil
	}
	return nil
}
