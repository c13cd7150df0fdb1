//go:build ucx

package ucx

const builtWithUCX = true
