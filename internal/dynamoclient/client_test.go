package dynamoclient_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/oncehq/once/internal/dynamoclient"
)

// TestSDKLogsAreStructured: what the SDK logs goes to slog's default logger
// as JSON lines at its level, never as the SDK's unstructured lines.
func TestSDKLogsAreStructured(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	cfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger.Logf(logging.Warn, "failed to discard remaining HTTP response body, %v", "read: connection reset")
	cfg.Logger.Logf(logging.Debug, "request %d", 7)
	var got []map[string]any
	for line := range bytes.Lines(buf.Bytes()) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		delete(m, "time")
		got = append(got, m)
	}
	want := []map[string]any{
		{"level": "WARN", "msg": "aws sdk", "detail": "failed to discard remaining HTTP response body, read: connection reset"},
		{"level": "DEBUG", "msg": "aws sdk", "detail": "request 7"},
	}
	if len(got) != len(want) {
		t.Fatalf("lines = %v, want %v", got, want)
	}
	for i := range want {
		for k, v := range want[i] {
			if got[i][k] != v {
				t.Errorf("line %d %s = %v, want %v", i, k, got[i][k], v)
			}
		}
	}
}

// TestConfigEndpoint: an emulator's endpoint gets dummy credentials, an AWS
// endpoint the usual ones (AWS refuses dummy ones with "The security token
// included in the request is invalid"); only an emulator's endpoint (a
// loopback address, localhost, the local stack's hosts) defaults the region
// to us-east-1, any other is signed in the region the environment names or
// not at all (a VPC endpoint in eu-west-1 signed for us-east-1 would fail at
// the first call with a signature error); and what is not an endpoint, or no
// region at all, is an error that says so before any call.
func TestConfigEndpoint(t *testing.T) {
	const noRegion = "set AWS_REGION"
	tests := []struct {
		name, endpoint, region string
		env                    map[string]string // more of the environment
		wantKey                string            // the access key the calls are signed with
		wantRegion             string            // the region they are signed in
		wantErr                string            // in the error; empty: none
	}{
		{name: "DynamoDB Local", endpoint: "http://127.0.0.1:8000", wantKey: "local", wantRegion: "us-east-1"},
		{name: "another loopback address", endpoint: "http://127.0.0.2:8000", wantKey: "local", wantRegion: "us-east-1"},
		{name: "IPv6 loopback", endpoint: "http://[::1]:8000", wantKey: "local", wantRegion: "us-east-1"},
		{name: "LocalStack by name", endpoint: "http://localstack:4566", wantKey: "local", wantRegion: "us-east-1"},
		{name: "LocalStack's own domain", endpoint: "http://localhost.localstack.cloud:4566", wantKey: "local", wantRegion: "us-east-1"},
		{name: "Docker's host", endpoint: "http://host.docker.internal:8000", wantKey: "local", wantRegion: "us-east-1"},
		{name: "under localhost", endpoint: "http://ddb.localhost:8000", wantKey: "local", wantRegion: "us-east-1"},
		{name: "localhost, upper case, trailing dot", endpoint: "http://LOCALHOST.:8000", wantKey: "local", wantRegion: "us-east-1"},
		{name: "IPv4-mapped IPv6 loopback", endpoint: "http://[::ffff:127.0.0.1]:8000", wantKey: "local", wantRegion: "us-east-1"},
		{name: "under LocalStack's service name", endpoint: "http://s3.localstack:4566", wantKey: "local", wantRegion: "us-east-1"},
		{name: "LocalStack's name as a prefix, no region", endpoint: "http://localstack.evil.example:4566", wantErr: noRegion},
		{name: "localhost as a prefix, no region", endpoint: "http://localhost.example.com:8000", wantErr: noRegion},
		{name: "localhost, region set", endpoint: "http://localhost:8000", region: "eu-west-1", wantKey: "local", wantRegion: "eu-west-1"},
		{name: "a look-alike, region set", endpoint: "https://dynamodb.amazonaws.com.example.net", region: "eu-west-1", wantKey: "local", wantRegion: "eu-west-1"},
		{name: "a look-alike, no region", endpoint: "https://dynamodb.amazonaws.com.example.net", wantErr: noRegion},
		{name: "another host, no region", endpoint: "http://10.0.0.7:8000", wantErr: noRegion},
		{name: "AWS's regional endpoint", endpoint: "https://dynamodb.us-east-1.amazonaws.com", region: "us-east-1", wantKey: "AKIDFROMENV", wantRegion: "us-east-1"},
		{name: "AWS, upper case, trailing dot", endpoint: "https://DynamoDB.eu-west-1.AmazonAWS.com.", region: "eu-west-1", wantKey: "AKIDFROMENV", wantRegion: "eu-west-1"},
		{name: "a VPC endpoint", endpoint: "https://vpce-0a1b2c3d-abcdefgh.dynamodb.eu-west-1.vpce.amazonaws.com", region: "eu-west-1", wantKey: "AKIDFROMENV", wantRegion: "eu-west-1"},
		{name: "a VPC endpoint, no region", endpoint: "https://vpce-0a1b2c3d-abcdefgh.dynamodb.eu-west-1.vpce.amazonaws.com", wantErr: noRegion},
		{name: "a VPC endpoint, AWS_DEFAULT_REGION", endpoint: "https://vpce-0a1b2c3d-abcdefgh.dynamodb.eu-west-1.vpce.amazonaws.com",
			env: map[string]string{"AWS_DEFAULT_REGION": "eu-west-1"}, wantKey: "AKIDFROMENV", wantRegion: "eu-west-1"},
		{name: "AWS's regional endpoint, no region", endpoint: "https://dynamodb.eu-west-1.amazonaws.com", wantErr: noRegion},
		{name: "dual-stack, no region", endpoint: "https://dynamodb.us-east-1.api.aws", wantErr: noRegion},
		{name: "China", endpoint: "https://dynamodb.cn-north-1.amazonaws.com.cn", region: "cn-north-1", wantKey: "AKIDFROMENV", wantRegion: "cn-north-1"},
		{name: "China, no region", endpoint: "https://dynamodb.cn-north-1.amazonaws.com.cn", wantErr: noRegion},
		{name: "AWS without an endpoint", region: "us-east-1", wantKey: "AKIDFROMENV", wantRegion: "us-east-1"},
		{name: "no scheme", endpoint: "localhost:8000", wantErr: `endpoint "localhost:8000" is not an absolute http(s) URL`},
		{name: "another scheme", endpoint: "tcp://localhost:8000", wantErr: `endpoint "tcp://localhost:8000" is not an absolute http(s) URL`},
		{name: "not a URL", endpoint: "::", wantErr: `endpoint "::" is not an absolute http(s) URL`},
		{name: "no region, no endpoint", wantErr: noRegion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The environment of a function (credentials from the role,
			// in variables), and no shared configuration to fall back on.
			t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
			t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
			t.Setenv("AWS_REGION", "")
			t.Setenv("AWS_DEFAULT_REGION", "")
			t.Setenv("AWS_PROFILE", "")
			t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "config"))
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "credentials"))
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: tt.endpoint, Region: tt.region})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Config(%q) = %v, want an error saying %q", tt.endpoint, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Config(%q) = %v", tt.endpoint, err)
			}
			creds, err := cfg.Credentials.Retrieve(t.Context())
			if err != nil || creds.AccessKeyID != tt.wantKey {
				t.Errorf("Config(%q) signs with %q, %v; want %q", tt.endpoint, creds.AccessKeyID, err, tt.wantKey)
			}
			if cfg.Region != tt.wantRegion {
				t.Errorf("Config(%q).Region = %q, want %q", tt.endpoint, cfg.Region, tt.wantRegion)
			}
		})
	}
}

// TestRetryBounds: the configuration's retryer makes at most MaxAttempts
// attempts, never waits longer than MaxBackoff between two (in the SDK's
// legacy retry mode and in its 2026 one alike), and each attempt is bounded
// by Timeout; so a call that fails fails within CallBound.
func TestRetryBounds(t *testing.T) {
	tests := []struct {
		name string
		opts dynamoclient.Options
		want dynamoclient.Options // with the defaults filled in
	}{
		{"defaults", dynamoclient.Options{}, dynamoclient.Options{
			MaxAttempts: dynamoclient.DefaultMaxAttempts, MaxBackoff: dynamoclient.DefaultMaxBackoff, Timeout: dynamoclient.DefaultTimeout,
		}},
		{"set", dynamoclient.Options{MaxAttempts: 5, MaxBackoff: 3 * time.Second, Timeout: 10 * time.Second},
			dynamoclient.Options{MaxAttempts: 5, MaxBackoff: 3 * time.Second, Timeout: 10 * time.Second}},
		// audit.ClientOptions' values, written out: these tests do not
		// import the auditor (and, through it, the app).
		{"auditor's", dynamoclient.Options{MaxAttempts: 5, MaxBackoff: 2 * time.Second, Timeout: 10 * time.Second},
			dynamoclient.Options{MaxAttempts: 5, MaxBackoff: 2 * time.Second, Timeout: 10 * time.Second}},
	}
	for _, mode := range []string{"", "true"} {
		for _, tt := range tests {
			t.Run(tt.name+"/AWS_NEW_RETRIES_2026="+mode, func(t *testing.T) {
				t.Setenv("AWS_NEW_RETRIES_2026", mode)
				opts := tt.opts
				opts.Endpoint = "http://127.0.0.1:1"
				cfg, err := dynamoclient.Config(t.Context(), opts)
				if err != nil {
					t.Fatal(err)
				}
				r := cfg.Retryer()
				if got := r.MaxAttempts(); got != tt.want.MaxAttempts {
					t.Errorf("MaxAttempts() = %d, want %d", got, tt.want.MaxAttempts)
				}
				timeout := cfg.HTTPClient.(*awshttp.BuildableClient).GetTimeout()
				if timeout != tt.want.Timeout {
					t.Errorf("HTTP client timeout = %v, want %v", timeout, tt.want.Timeout)
				}
				// The delays are random (full jitter in the 2026 mode):
				// sample each retry's many times, for every kind of error.
				errs := []error{
					&smithyhttp.RequestSendError{Err: errors.New("connection reset")},
					&smithy.GenericAPIError{Code: "ThrottlingException"},
					&smithy.GenericAPIError{Code: "InternalServerError"},
				}
				var longest time.Duration
				for attempt := 1; attempt < r.MaxAttempts(); attempt++ {
					slowest := time.Duration(0)
					for _, e := range errs {
						for range 200 {
							d, err := r.RetryDelay(attempt, e)
							if err != nil {
								t.Fatalf("RetryDelay(%d, %v) = %v", attempt, e, err)
							}
							if d < 0 || d > tt.want.MaxBackoff {
								t.Fatalf("RetryDelay(%d, %v) = %v, want within [0, %v]", attempt, e, d, tt.want.MaxBackoff)
							}
							slowest = max(slowest, d)
						}
					}
					longest += slowest
				}
				bound := time.Duration(r.MaxAttempts())*timeout + longest
				if got := dynamoclient.CallBound(tt.opts); bound > got {
					t.Errorf("the slowest failing call sampled takes %v, more than CallBound = %v", bound, got)
				}
			})
		}
	}
}

// TestCallBound: the defaults' bound, which the README and the api function's
// timeout rely on.
func TestCallBound(t *testing.T) {
	if got, want := dynamoclient.CallBound(dynamoclient.Options{}), 6400*time.Millisecond; got != want {
		t.Errorf("CallBound(defaults) = %v, want %v", got, want)
	}
}

// TestMaxAttemptsFromEnvironment: AWS_MAX_ATTEMPTS does not raise the
// attempts of a call (the SDK loads it only when no retryer is configured,
// and would then wrap each client's retryer with its count): a DynamoDB
// that fails every attempt gets DefaultMaxAttempts of them.
func TestMaxAttemptsFromEnvironment(t *testing.T) {
	t.Setenv("AWS_MAX_ATTEMPTS", "7")
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}`))
	}))
	defer srv.Close()
	cfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dynamoclient.New(cfg, srv.URL).GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName: aws.String("t"),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
	})
	if err == nil {
		t.Fatal("GetItem succeeded against a DynamoDB that answers 500")
	}
	if got := int(attempts.Load()); got != dynamoclient.DefaultMaxAttempts {
		t.Errorf("GetItem made %d attempts with AWS_MAX_ATTEMPTS=7, want %d", got, dynamoclient.DefaultMaxAttempts)
	}
}
