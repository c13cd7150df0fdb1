package rendezvous_test

import (
	"github.com/prometheus/client_golang/prometheus"
)

// valueOf reads one counter or gauge series from reg (0 when absent).
func valueOf(reg *prometheus.Registry, family string, labels map[string]string) float64 {
	fams, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
