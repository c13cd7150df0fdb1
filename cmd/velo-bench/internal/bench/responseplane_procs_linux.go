package bench

import "syscall"

// rpSysProcAttr makes a --procs child die with the parent, even a parent
// killed with SIGKILL that cannot kill its children itself.
func rpSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
