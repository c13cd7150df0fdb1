package main

import (
	"context"
	"testing"
	"time"

	"github.com/velo-go/velo/discovery/discoverytest"
)

// TestDemoWithNATSDiscovery runs the whole demo with peers found through
// an embedded nats-server. The demo's handlers keep process-wide state, so
// only one demo runs per test binary.
func TestDemoWithNATSDiscovery(t *testing.T) {
	if err := runDemo([]string{"--discovery", "nats"}); err != nil {
		t.Fatal(err)
	}
}

// TestDemoEtcdBackend: the etcd backend the demo starts serves lookups
// between two of its clients.
func TestDemoEtcdBackend(t *testing.T) {
	d, err := startDemoDiscovery("etcd")
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	a, err := d.open()
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.open()
	if err != nil {
		t.Fatal(err)
	}
	info := discoverytest.NewPeer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Register(ctx, info); err != nil {
		t.Fatal(err)
	}
	discoverytest.MustFind(t, b, info)
}

func TestDemoRejectsUnknownDiscovery(t *testing.T) {
	if _, err := startDemoDiscovery("zookeeper"); err == nil {
		t.Fatal("an unknown backend was accepted")
	}
}
