package once_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once"
	"github.com/oncehq/once/idempotency"
)

// TestMiddlewareConfig: a nil client or an empty table name (the README's
// main reads it from an environment variable) fails Middleware at start-up,
// naming what is missing, instead of answering 500 to every request.
func TestMiddlewareConfig(t *testing.T) {
	client := dynamodb.NewFromConfig(aws.Config{Region: "us-east-1"})
	tests := []struct {
		name    string
		client  *dynamodb.Client
		table   string
		wantErr []string
	}{
		{"client and table", client, "idempotency", nil},
		{"empty table", client, "", []string{"table name is empty"}},
		{"nil client", nil, "idempotency", []string{"client is nil"}},
		{"neither", nil, "", []string{"client is nil", "table name is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := once.Middleware(tt.client, tt.table, idempotency.Config{})
			if len(tt.wantErr) == 0 {
				if err != nil || mw == nil {
					t.Fatalf("Middleware() = %v, %v; want a middleware", mw, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Middleware() = nil error, want one naming %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Middleware() = %q, want it to name %q", err, want)
				}
			}
		})
	}
}
