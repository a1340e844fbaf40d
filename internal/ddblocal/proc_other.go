//go:build !unix

package ddblocal

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
