package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// grafanaDashboard is the part of a Grafana dashboard the test reads.
type grafanaDashboard struct {
	Title      string `json:"title"`
	Templating struct {
		List []grafanaVariable `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaVariable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

type grafanaPanel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a row's
}

func (p grafanaPanel) all() []grafanaPanel {
	out := []grafanaPanel{p}
	for _, c := range p.Panels {
		out = append(out, c.all()...)
	}
	return out
}

// TestGrafanaDashboard keeps docs/grafana/velo-dashboard.json usable: it
// parses, it has a Prometheus data source variable that every panel
// uses, every panel has a query, and every velo_ name a query gives is a
// family a registry exposes (or a histogram's _bucket, _sum or _count).
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana/velo-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	hasDS := slices.ContainsFunc(d.Templating.List, func(v grafanaVariable) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	})
	if !hasDS {
		t.Fatal(`no "datasource" variable of type datasource for prometheus`)
	}
	fams := families(t)
	name := regexp.MustCompile(`velo_[a-z0-9_]+`)
	used := map[string]bool{}
	var panels []grafanaPanel
	for _, p := range d.Panels {
		panels = append(panels, p.all()...)
	}
	if len(panels) < 10 {
		t.Fatalf("%d panels; the reading is broken", len(panels))
	}
	for _, p := range panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := name.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no velo family", p.Title, tg.Expr)
			}
			for _, n := range names {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && slices.Contains(fams, b) {
						base = b
					}
				}
				if !slices.Contains(fams, base) {
					t.Errorf("panel %q: %s is no family", p.Title, n)
				}
				used[base] = true
			}
		}
	}
	// The main families of the issue that asked for the dashboard.
	for _, f := range []string{
		"velo_transport_frames_total", "velo_messenger_inbound_dequeued_total",
		"velo_streaming_mux_batches_total", "velo_streaming_mux_records_per_batch",
		"velo_streaming_slot_credit_exhausted_total", "velo_streaming_active_anchors",
		"velo_rendezvous_bytes_total", "velo_transport_rejections_total",
	} {
		if !used[f] {
			t.Errorf("no panel shows %s", f)
		}
	}
}
