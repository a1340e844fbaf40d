package app_test

import (
	"strings"
	"testing"

	"github.com/oncehq/once/internal/reconciler"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
)

// TestStartStreamRefuses checks that a stream function that cannot start
// says why and starts nothing: lambda.StartWithOptions, outside the Lambda
// runtime, would end the test binary.
func TestStartStreamRefuses(t *testing.T) {
	type builder = func(config.Config, *dynamodb.Client, app.Options) (stream.Handler, error)
	tests := []struct {
		name  string
		build builder
		env   map[string]string
		names []string // variables the error must name
		built bool     // the configuration is valid: build is called, and fails
	}{
		{
			name: "reconciler: invalid values", build: reconciler.Handler,
			env:   map[string]string{"ONCE_PROVIDER_TIMEOUT": "soon", "ONCE_PROVIDER_URL": "ftp://provider"},
			names: []string{"ONCE_PROVIDER_TIMEOUT", "ONCE_PROVIDER_URL"},
		},
		{
			name: "reconciler: no provider", build: reconciler.Handler,
			env:   map[string]string{"DYNAMODB_ENDPOINT": "http://127.0.0.1:1"},
			names: []string{"ONCE_PROVIDER_URL"}, built: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			built := false
			build := func(cfg config.Config, client *dynamodb.Client, opts app.Options) (stream.Handler, error) {
				built = true
				return tt.build(cfg, client, opts)
			}
			err := app.StartStream(t.Context(), func(k string) string { return tt.env[k] }, build)
			if err == nil {
				t.Fatal("StartStream() = nil, want an error")
			}
			for _, name := range tt.names {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("StartStream() error = %q, want it to name %s", err, name)
				}
			}
			if built != tt.built {
				t.Errorf("StartStream() called build: %v, want %v", built, tt.built)
			}
		})
	}
}
