package ddblocal

import "syscall"

// sysProcAttr puts the JVM in its own process group, so a Ctrl-C meant for
// the devstack does not reach it before the devstack's own shutdown, and has
// the kernel kill it if the process that started it dies without stopping it
// (strictly, if the starting OS thread exits: the Go runtime only ends a
// thread when a goroutine locked to it returns, which nothing here does).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
