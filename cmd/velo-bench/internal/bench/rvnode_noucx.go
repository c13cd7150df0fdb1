//go:build !ucx

package bench

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/velo-go/velo"
)

// ucxBuilt reports whether this build has UCX.
const ucxBuilt = false

func rvNode(context.Context, *prometheus.Registry, int, bool) (*velo.Node, error) {
	return nil, errNoUCX
}
