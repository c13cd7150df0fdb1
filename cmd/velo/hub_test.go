package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHubDemo: the demo registers two nodes, calls by service name
// through the hub, unregisters both and stops the hub.
func TestHubDemo(t *testing.T) {
	var out bytes.Buffer
	if err := hubDemo(context.Background(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"worker registered", "caller registered", `-> "hello, hub"`, "worker unregistered", "hub stopped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestHubConfigRefused: a config with an unknown field or a zero
// interval is refused before anything binds.
func TestHubConfigRefused(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"typo.json": `{"heartbeat_intervl_ms": 100}`,
		"zero.json": `{"heartbeat_interval_ms": 0}`,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		if err := run([]string{"hub", "--config", p}); err == nil {
			t.Errorf("%s was accepted", name)
		}
	}
	// An etcd store is velo-hub's: velo says so instead of serving
	// registrations from memory that the file wanted kept in etcd.
	p := filepath.Join(dir, "etcd.json")
	os.WriteFile(p, []byte(`{"store": {"kind": "etcd", "endpoints": ["127.0.0.1:2379"]}}`), 0o644)
	if err := run([]string{"hub", "--config", p}); err == nil || !strings.Contains(err.Error(), "needs velo-hub: go run ./cmd/velo-hub --config") {
		t.Errorf("velo hub on an etcd store: %v", err)
	}
	if err := run([]string{"hub"}); err == nil {
		t.Error("velo hub without --config or --demo succeeded")
	}
}
