package soak

import "syscall"

// childProcAttr makes a child die with the driver, even one killed with
// SIGKILL.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
