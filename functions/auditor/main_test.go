package main

import (
	"testing"

	"github.com/oncehq/once/internal/lambdatest"
)

func TestMain(m *testing.M) { lambdatest.Main(m, main) }

// TestStartupFailureIsJSON runs main with a bad configuration: it exits
// with status 1 after one JSON line saying why.
func TestStartupFailureIsJSON(t *testing.T) {
	lambdatest.CheckStartupFailure(t, map[string]string{"ONCE_RETENTION": "forever"}, "ONCE_RETENTION")
}
