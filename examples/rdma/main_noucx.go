//go:build !ucx

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "this example needs UCX: go run -tags ucx ./examples/rdma (with Debian's libucx-dev installed)")
	os.Exit(2)
}
