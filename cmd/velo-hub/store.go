package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/velo-go/velo/hub/store/etcdstore"
	"github.com/velo-go/velo/internal/hubconf"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// openEtcd connects to etcd and opens the store's prefix. With
// wait_for_prefix, a prefix another hub holds (a crashed hub's lock
// lives up to 10 s) is waited for until ctx ends; without it, it is an
// error. The client is returned so the caller closes it after the store.
func openEtcd(ctx context.Context, s hubconf.Store, ttl time.Duration, log *slog.Logger) (*etcdstore.Store, *clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   s.Endpoints,
		DialTimeout: time.Duration(s.DialTimeoutMS) * time.Millisecond,
		// Keep-alives let the store notice a cut connection (Degraded)
		// in seconds rather than at the next request.
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
		Logger: zap.NewNop(), Username: s.Username,
	}
	if s.PasswordFile != "" {
		pw, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return nil, nil, fmt.Errorf("store.password_file: %w", err)
		}
		cfg.Password = strings.TrimRight(string(pw), "\r\n")
	}
	if s.TLS != nil {
		tc, err := tlsConfig(*s.TLS)
		if err != nil {
			return nil, nil, fmt.Errorf("store.tls: %w", err)
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd client %v: %w", s.Endpoints, err)
	}
	st, err := openPrefix(ctx, cli, s, ttl, log)
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return st, cli, nil
}

func openPrefix(ctx context.Context, cli *clientv3.Client, s hubconf.Store, ttl time.Duration, log *slog.Logger) (*etcdstore.Store, error) {
	opts := []etcdstore.Option{etcdstore.WithPrefix(s.Prefix), etcdstore.WithTTL(ttl)}
	for {
		// A first connection that cannot be made fails here, within the
		// dial timeout, rather than hanging.
		octx, cancel := context.WithTimeout(ctx, time.Duration(s.DialTimeoutMS)*time.Millisecond+10*time.Second)
		st, err := etcdstore.New(octx, cli, opts...)
		cancel()
		if err == nil {
			return st, nil
		}
		if !errors.Is(err, etcdstore.ErrPrefixHeld) {
			return nil, fmt.Errorf("etcd store %v %s: %w", s.Endpoints, s.Prefix, err)
		}
		if !s.WaitForPrefix {
			return nil, fmt.Errorf("etcd store %s: %w (another hub runs on it, or one crashed less than 10 s ago: "+
				"set store.wait_for_prefix to wait)", s.Prefix, err)
		}
		log.Warn("velo-hub: the prefix is held by another hub; waiting for it (a crashed hub's lock expires within 10 s)",
			"prefix", s.Prefix)
		if err := etcdstore.WaitForPrefix(ctx, cli, s.Prefix); err != nil {
			return nil, fmt.Errorf("waiting for the prefix %s: %w", s.Prefix, err)
		}
	}
}

func tlsConfig(t hubconf.TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
