package embedded

import (
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a running in-process single-member etcd.
type Etcd struct {
	e        *embed.Etcd
	endpoint string
}

// StartEtcd starts etcd with its data under dir. Its heartbeat is 10 ms
// and its election timeout 100 ms, so the smallest lease TTL it grants is
// one second (etcd's floor is 1.5 election timeouts), which keeps lease
// expiry tests short.
func StartEtcd(dir string) (*Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.TickMs, cfg.ElectionMs = 10, 100
	client, peer, err := freeURLs()
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(20 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd: not ready within 20s")
	}
	return &Etcd{e: e, endpoint: client.Host}, nil
}

// Endpoint is host:port for clientv3.Config.Endpoints.
func (s *Etcd) Endpoint() string { return s.endpoint }

// Stop closes the server and waits for it.
func (s *Etcd) Stop() { s.e.Close() }

// freeURLs picks two free loopback ports. Another process could take one
// before etcd binds it; on a test machine that is rare enough.
func freeURLs() (client, peer url.URL, err error) {
	var ls [2]net.Listener
	for i := range ls {
		if ls[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return client, peer, err
		}
		defer ls[i].Close()
	}
	client = url.URL{Scheme: "http", Host: ls[0].Addr().String()}
	peer = url.URL{Scheme: "http", Host: ls[1].Addr().String()}
	return client, peer, nil
}
