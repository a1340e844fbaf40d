package main

import (
	"strings"
	"testing"
)

func TestRunBadConfig(t *testing.T) {
	env := map[string]string{"ONCE_API_KEYS_TABLE": "x", "LOG_LEVEL": "loud"}
	err := run(t.Context(), func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("run = nil, want a configuration error")
	}
	for _, want := range []string{"ONCE_API_KEYS_TABLE", "LOG_LEVEL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("run error does not mention %s:\n%v", want, err)
		}
	}
}
