//go:build ucx

package main

// buildTags are the tags this velo was built with that velo-bench needs
// too: the RDMA arms of `velo bench rendezvous` exist only with UCX.
const buildTags = "ucx"
