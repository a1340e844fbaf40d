//go:build unix && !linux

package ddblocal

import "syscall"

// sysProcAttr puts the JVM in its own process group, so a Ctrl-C meant for
// the devstack does not reach it before the devstack's own shutdown.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
