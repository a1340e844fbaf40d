package main

import (
	"strings"
	"testing"
)

func TestRunRefusesBadConfig(t *testing.T) {
	env := map[string]string{"ONCE_RETENTION": "forever", "ONCE_IDEMPOTENCY_TABLE": "x"}
	err := run(t.Context(), func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("run() with a bad configuration = nil, want an error")
	}
	for _, name := range []string{"ONCE_RETENTION", "ONCE_IDEMPOTENCY_TABLE"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("run() error = %q, want it to name %s", err, name)
		}
	}
}
