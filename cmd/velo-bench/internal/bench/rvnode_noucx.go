//go:build !ucx

package bench

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/velo-go/velo"
)

// errNoUCX: the RDMA arms need a velo-bench built with the ucx tag.
var errNoUCX = errors.New("this velo-bench was built without UCX: build it with `go build -tags ucx ./cmd/velo-bench` (needs libucx-dev)")

func rvNode(context.Context, *prometheus.Registry, int) (*velo.Node, error) { return nil, errNoUCX }
