package ext_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// ext is the plugin surface: out-of-tree transports and discovery backends
// import it, so it must import the standard library only (DESIGN.md section
// 2). This lists every non-standard package that ext pulls in (tests
// excluded) and fails on anything but ext itself.
func TestExtImportsStandardLibraryOnly(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go binary not found: %v", err)
	}
	const self = "github.com/velo-go/velo/ext"
	cmd := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.String())
	}
	var found bool
	for _, p := range strings.Fields(string(out)) {
		if p == self {
			found = true
			continue
		}
		t.Errorf("ext depends on non-standard package %s", p)
	}
	if !found {
		// An empty list would make this test check nothing.
		t.Fatalf("go list did not report %s itself; output:\n%s", self, out)
	}
}
