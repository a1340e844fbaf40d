package main

import (
	"strings"
	"testing"
)

func TestRunRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string // the variables the error must name
	}{
		{
			name: "invalid values",
			env:  map[string]string{"ONCE_PAYMENTS_TABLE": "x", "ONCE_PROVIDER_TIMEOUT": "forever", "ONCE_PROVIDER_URL": "provider"},
			want: []string{"ONCE_PAYMENTS_TABLE", "ONCE_PROVIDER_TIMEOUT", "ONCE_PROVIDER_URL"},
		},
		{
			name: "no provider",
			env:  map[string]string{"DYNAMODB_ENDPOINT": "http://127.0.0.1:1"},
			want: []string{"ONCE_PROVIDER_URL"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), func(k string) string { return tt.env[k] })
			if err == nil {
				t.Fatal("run() with a bad configuration = nil, want an error")
			}
			for _, name := range tt.want {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("run() error = %q, want it to name %s", err, name)
				}
			}
		})
	}
}
