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

// EtcdConfig says how StartEtcdWith runs etcd.
type EtcdConfig struct {
	// Dir holds etcd's data; a server started again on it keeps its keys.
	Dir string
	// Name is the member's name (etcd's default when empty).
	Name string
	// ClientAddr is the client listener's host:port; port 0 (or "") picks
	// a free loopback port. The peer listener always takes a free
	// loopback port: nobody else talks to a single member.
	ClientAddr string
	// FastElections sets a 10 ms heartbeat and a 100 ms election timeout,
	// so the smallest lease TTL etcd grants is one second (its floor is
	// 1.5 election timeouts), which keeps lease expiry tests short. Off,
	// etcd's own timings apply.
	FastElections bool
	// ReadyTimeout bounds the wait for the server (20 s when zero).
	ReadyTimeout time.Duration
}

// StartEtcd starts etcd for tests, with its data under dir and fast
// elections (see EtcdConfig).
func StartEtcd(dir string) (*Etcd, error) {
	return StartEtcdWith(EtcdConfig{Dir: dir, FastElections: true})
}

// StartEtcdWith starts etcd as c says and waits until it serves.
func StartEtcdWith(c EtcdConfig) (*Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = c.Dir
	if c.Name != "" {
		cfg.Name = c.Name
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if c.FastElections {
		cfg.TickMs, cfg.ElectionMs = 10, 100
	}
	if c.ClientAddr == "" {
		c.ClientAddr = "127.0.0.1:0"
	}
	client, err := freeURL(c.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: client address: %w", err)
	}
	peer, err := freeURL("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: peer address: %w", err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd in %s: %w", c.Dir, err)
	}
	wait := c.ReadyTimeout
	if wait <= 0 {
		wait = 20 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s: %w", c.Dir, err)
	case <-time.After(wait):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s: not ready within %v", c.Dir, wait)
	}
	return &Etcd{e: e, endpoint: client.Host}, nil
}

// Endpoint is host:port for clientv3.Config.Endpoints.
func (s *Etcd) Endpoint() string { return s.endpoint }

// Stop closes the server and waits for it.
func (s *Etcd) Stop() { s.e.Close() }

// freeURL resolves a port 0 in addr to a free port. Another process can
// take it before etcd binds it; etcd then fails to start, clearly.
func freeURL(addr string) (url.URL, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return url.URL{}, err
	}
	if port == "0" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return url.URL{}, err
		}
		addr = ln.Addr().String()
		ln.Close()
	} else if host == "" {
		return url.URL{}, fmt.Errorf("%q: name a host (etcd needs one to advertise)", addr)
	}
	return url.URL{Scheme: "http", Host: addr}, nil
}
