package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// heavyModules are what made a first `go run ./cmd/velo demo` take
// minutes: the embedded servers, grpc-go and the plotting library. They
// belong in velo-bench; velo must not compile them.
var heavyModules = []string{
	"go.etcd.io/",
	"github.com/nats-io/",
	"google.golang.org/grpc",
	"gonum.org/",
	"go.uber.org/zap",
}

func TestVeloImportsNoHeavyModule(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go binary not found: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.String())
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list reported no package; the check would pass on anything")
	}
	for _, p := range deps {
		for _, heavy := range heavyModules {
			if strings.HasPrefix(p, heavy) {
				t.Errorf("cmd/velo depends on %s; move what needs it to cmd/velo-bench", p)
			}
		}
	}
}
