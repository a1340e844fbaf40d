package once_test

import (
	"path/filepath"
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

// TestDynamoDBEnvironment: a DYNAMODB_ENDPOINT that is not an endpoint, or
// no region, fails DynamoDB at start-up with an error that names the
// variables and the cause; DynamoDB Local's endpoint works without a region.
func TestDynamoDBEnvironment(t *testing.T) {
	tests := []struct {
		name, endpoint, region string
		wantErr                []string // empty: no error
	}{
		{"DynamoDB Local", "http://127.0.0.1:8000", "", nil},
		{"AWS", "", "eu-west-1", nil},
		{"an endpoint without its scheme", "localhost:8000", "", []string{`DYNAMODB_ENDPOINT="localhost:8000"`, "not an absolute http(s) URL"}},
		{"no region", "", "", []string{`AWS_REGION=""`, "no AWS region"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DYNAMODB_ENDPOINT", tt.endpoint)
			t.Setenv("AWS_REGION", tt.region)
			t.Setenv("AWS_DEFAULT_REGION", "")
			t.Setenv("AWS_PROFILE", "")
			t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "config"))
			_, err := once.DynamoDB(t.Context())
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Errorf("DynamoDB() = %v, want a client", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("DynamoDB() = nil error, want one naming %q", tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("DynamoDB() = %q, want it to name %q", err, s)
				}
			}
		})
	}
}
