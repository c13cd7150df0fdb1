//go:build !linux

package bench

import "syscall"

// rpSysProcAttr: without Pdeathsig a child notices a dead parent when its
// stdin closes.
func rpSysProcAttr() *syscall.SysProcAttr { return nil }
