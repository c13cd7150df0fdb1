package main

import (
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// embeddedEtcd is a single-member etcd server in this process, for a
// trial on one box: its data stays in the directory, so a hub restarted
// on the same directory recovers its registrations.
type embeddedEtcd struct {
	e        *embed.Etcd
	endpoint string
}

// startEmbeddedEtcd starts etcd on dir with its client listener at
// clientAddr (port 0: a free port) and a peer listener on a free
// loopback port, nobody else's business.
func startEmbeddedEtcd(dir, clientAddr string) (*embeddedEtcd, error) {
	client, err := freeURL(clientAddr)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: client address: %w", err)
	}
	peer, err := freeURL("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: peer address: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "velo-hub"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s: %w", dir, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s: not ready within 60 s", dir)
	}
	return &embeddedEtcd{e: e, endpoint: client.Host}, nil
}

func (s *embeddedEtcd) stop() { s.e.Close() }

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
