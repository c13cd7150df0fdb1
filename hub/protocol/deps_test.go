package protocol_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// A program that only speaks the hub's protocol imports this package, so
// it must pull in the standard library and ext only.
func TestProtocolImportsOnlyExtAndStdlib(t *testing.T) {
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
	allowed := map[string]bool{"github.com/velo-go/velo/ext": true, "github.com/velo-go/velo/hub/protocol": true}
	n := 0
	for _, p := range strings.Fields(string(out)) {
		n++
		if !allowed[p] {
			t.Errorf("hub/protocol depends on %s", p)
		}
	}
	if n != 2 {
		t.Fatalf("go list reported %d packages: %s", n, out)
	}
}
