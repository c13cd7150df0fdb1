package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// families are the names of every family Register puts in a registry,
// read from the collectors' descriptions (a registry's Gather leaves out a
// family that has no series yet, and most are bound on first use).
func families(t *testing.T) []string {
	t.Helper()
	_, m := mustRegister(t)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for _, c := range m.collectors() {
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			sub := fq.FindStringSubmatch(d.String())
			if sub == nil {
				t.Fatalf("no name in %s", d)
			}
			names = append(names, sub[1])
		}
	}
	slices.Sort(names)
	return names
}

// TestDocsListEveryFamily keeps docs/metrics.md true: every family a
// registry can expose is named there in full, and every velo_ name the
// page gives is a family (or a histogram's _bucket, _sum or _count of one).
// Names that end in '_' are the page's wildcards (velo_messenger_*) and
// those of families not built, which it says are not.
func TestDocsListEveryFamily(t *testing.T) {
	page, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, n := range regexp.MustCompile(`velo_[a-z0-9_]+`).FindAllString(string(page), -1) {
		named[n] = true
	}
	fams := families(t)
	if len(fams) < 40 {
		t.Fatalf("%d families read from the collectors; the reading is broken", len(fams))
	}
	for _, f := range fams {
		if !named[f] {
			t.Errorf("docs/metrics.md does not list %s", f)
		}
	}
	for n := range named {
		if strings.HasSuffix(n, "_") || slices.Contains(fams, n) {
			continue
		}
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		if !slices.Contains(fams, base) {
			t.Errorf("docs/metrics.md names %s, which no family is", n)
		}
	}
}
