//go:build !linux

package soak

import "syscall"

// childProcAttr: no parent-death signal off Linux.
func childProcAttr() *syscall.SysProcAttr { return nil }
