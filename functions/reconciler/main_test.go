package main

import (
	"strings"
	"testing"
)

func TestRunRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		names []string // variables the error must name
	}{
		{
			name:  "malformed variables",
			env:   map[string]string{"ONCE_PROVIDER_TIMEOUT": "soon", "ONCE_PROVIDER_URL": "ftp://provider"},
			names: []string{"ONCE_PROVIDER_TIMEOUT", "ONCE_PROVIDER_URL"},
		},
		{
			name:  "no provider",
			env:   map[string]string{"DYNAMODB_ENDPOINT": "http://127.0.0.1:1"},
			names: []string{"ONCE_PROVIDER_URL"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), func(k string) string { return tt.env[k] })
			if err == nil {
				t.Fatal("run() with a bad configuration = nil, want an error")
			}
			for _, name := range tt.names {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("run() error = %q, want it to name %s", err, name)
				}
			}
		})
	}
}
