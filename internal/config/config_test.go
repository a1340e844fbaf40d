package config

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFromEnv(t *testing.T) {
	defaults := Config{
		Retention:       DefaultRetention,
		Lease:           DefaultLease,
		LogLevel:        slog.LevelInfo,
		ProviderTimeout: DefaultProviderTimeout,
		ProviderSettle:  DefaultProviderSettle,
		ProviderAuth:    ProviderAuthNone,

		ProviderKeyRetention: DefaultProviderKeyRetention,

		CheckQueue:          DefaultCheckQueue,
		CheckDLQ:            DefaultCheckDLQ,
		WorkerRetryQueue:    DefaultWorkerRetryQueue,
		WorkerRetryDLQ:      DefaultWorkerRetryDLQ,
		WorkerRetryWindow:   DefaultWorkerRetryWindow,
		WorkerLookUpHorizon: DefaultWorkerLookUpHorizon,
		ReceiptRetryQueue:   DefaultReceiptRetryQueue,
		ReceiptRetryDLQ:     DefaultReceiptRetryDLQ,
		ReceiptAttempts:     DefaultReceiptAttempts,
		MailAuth:            ProviderAuthNone,
	}
	with := func(f func(*Config)) Config {
		c := defaults
		f(&c)
		return c
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr []string // substrings, one per expected problem
	}{
		{name: "empty environment", want: defaults},
		{
			name: "everything set",
			env: map[string]string{
				"ONCE_RETENTION":        "1h30m",
				"ONCE_LEASE":            "10s",
				"ONCE_FAULT_INJECTION":  "1",
				"DYNAMODB_ENDPOINT":     "http://127.0.0.1:8000",
				"AWS_REGION":            "eu-west-1",
				"LOG_LEVEL":             "debug",
				"ONCE_PROVIDER_URL":     "https://provider.example.com",
				"ONCE_PROVIDER_TIMEOUT": "2500ms",
				"ONCE_PROVIDER_AUTH":    "aws_iam",

				"ONCE_PROVIDER_KEY_RETENTION": "48h",

				"ONCE_CHECK_QUEUE":           "https://sqs.eu-west-1.amazonaws.com/123456789012/stack-CheckQueue-AbC",
				"ONCE_CHECK_DLQ":             "stack-check-dlq",
				"ONCE_WORKER_RETRY_QUEUE":    "http://127.0.0.1:9324/000000000000/retry",
				"ONCE_WORKER_RETRY_DLQ":      "retry_dlq",
				"ONCE_WORKER_RETRY_WINDOW":   "90s",
				"ONCE_WORKER_LOOKUP_HORIZON": "72h",
				"SQS_ENDPOINT":               "http://127.0.0.1:9324",
				"ONCE_MAIL_URL":              "https://mail.example.com",
				"ONCE_MAIL_AUTH":             "AWS_IAM",
				"ONCE_RECEIPT_RETRY_QUEUE":   "https://sqs.eu-west-1.amazonaws.com/123456789012/stack-ReceiptRetryQueue-AbC",
				"ONCE_RECEIPT_RETRY_DLQ":     "receipt-dlq",
				"ONCE_RECEIPT_ATTEMPTS":      "4",
			},
			want: Config{
				Retention:        90 * time.Minute,
				Lease:            10 * time.Second,
				FaultInjection:   true,
				DynamoDBEndpoint: "http://127.0.0.1:8000",
				Region:           "eu-west-1",
				LogLevel:         slog.LevelDebug,
				ProviderURL:      "https://provider.example.com",
				ProviderTimeout:  2500 * time.Millisecond,
				ProviderSettle:   DefaultProviderSettle,
				ProviderAuth:     ProviderAuthIAM,

				ProviderKeyRetention: 48 * time.Hour,

				CheckQueue:          "https://sqs.eu-west-1.amazonaws.com/123456789012/stack-CheckQueue-AbC",
				CheckDLQ:            "stack-check-dlq",
				WorkerRetryQueue:    "http://127.0.0.1:9324/000000000000/retry",
				WorkerRetryDLQ:      "retry_dlq",
				WorkerRetryWindow:   90 * time.Second,
				WorkerLookUpHorizon: 72 * time.Hour,
				SQSEndpoint:         "http://127.0.0.1:9324",
				MailURL:             "https://mail.example.com",
				MailAuth:            ProviderAuthIAM,
				ReceiptRetryQueue:   "https://sqs.eu-west-1.amazonaws.com/123456789012/stack-ReceiptRetryQueue-AbC",
				ReceiptRetryDLQ:     "receipt-dlq",
				ReceiptAttempts:     4,
			},
		},
		// AWS_REGION as given: the clients decide a region it leaves out
		// (dynamoclient.Config: us-east-1 at an emulator's endpoint, else
		// the SDK's sources or an error), each for its own endpoint.
		{name: "SQS endpoint without region leaves it to the client", env: map[string]string{"SQS_ENDPOINT": "http://localhost:4566"},
			want: with(func(c *Config) { c.SQSEndpoint = "http://localhost:4566" })},
		{name: "AWS endpoint without region leaves it to the client",
			env: map[string]string{"DYNAMODB_ENDPOINT": "https://vpce-0a1b2c3d-abcdefgh.dynamodb.eu-west-1.vpce.amazonaws.com"},
			want: with(func(c *Config) {
				c.DynamoDBEndpoint = "https://vpce-0a1b2c3d-abcdefgh.dynamodb.eu-west-1.vpce.amazonaws.com"
			})},
		{name: "emulator for SQS, AWS for DynamoDB, no region",
			env: map[string]string{"SQS_ENDPOINT": "http://127.0.0.1:9324", "DYNAMODB_ENDPOINT": "https://dynamodb.eu-west-1.amazonaws.com"},
			want: with(func(c *Config) {
				c.SQSEndpoint, c.DynamoDBEndpoint = "http://127.0.0.1:9324", "https://dynamodb.eu-west-1.amazonaws.com"
			})},
		{name: "bad queue name", env: map[string]string{"ONCE_CHECK_QUEUE": "check.fifo"}, wantErr: []string{"ONCE_CHECK_QUEUE"}},
		{name: "queue URL without scheme", env: map[string]string{"ONCE_WORKER_RETRY_DLQ": "sqs.amazonaws.com/1/q x"}, wantErr: []string{"ONCE_WORKER_RETRY_DLQ"}},
		{name: "bad retry window", env: map[string]string{"ONCE_WORKER_RETRY_WINDOW": "0s"}, wantErr: []string{"ONCE_WORKER_RETRY_WINDOW"}},
		{name: "look-up horizon not a duration", env: map[string]string{"ONCE_WORKER_LOOKUP_HORIZON": "1d"}, wantErr: []string{"ONCE_WORKER_LOOKUP_HORIZON"}},
		{name: "look-up horizon zero", env: map[string]string{"ONCE_WORKER_LOOKUP_HORIZON": "0s"}, wantErr: []string{"ONCE_WORKER_LOOKUP_HORIZON=\"0s\": must be positive"}},
		{name: "look-up horizon under SQS's longest delay", env: map[string]string{"ONCE_WORKER_LOOKUP_HORIZON": "14m59s"}, wantErr: []string{"ONCE_WORKER_LOOKUP_HORIZON=\"14m59s\": must be at least 15m0s"}},
		{name: "look-up horizon at SQS's longest delay", env: map[string]string{"ONCE_WORKER_LOOKUP_HORIZON": "15m"},
			want: with(func(c *Config) { c.WorkerLookUpHorizon = MinWorkerLookUpHorizon })},
		{name: "look-up horizon of 14 days", env: map[string]string{"ONCE_WORKER_LOOKUP_HORIZON": "336h"},
			want: with(func(c *Config) { c.WorkerLookUpHorizon = MaxWorkerLookUpHorizon })},
		{name: "look-up horizon past SQS's longest retention", env: map[string]string{"ONCE_WORKER_LOOKUP_HORIZON": "336h1s"}, wantErr: []string{"ONCE_WORKER_LOOKUP_HORIZON=\"336h0m1s\": must be at most 336h0m0s"}},
		{name: "one receipt attempt", env: map[string]string{"ONCE_RECEIPT_ATTEMPTS": "1"}, wantErr: []string{"ONCE_RECEIPT_ATTEMPTS"}},
		{name: "receipt attempts not a number", env: map[string]string{"ONCE_RECEIPT_ATTEMPTS": "ten"}, wantErr: []string{"ONCE_RECEIPT_ATTEMPTS"}},
		{name: "too many receipt attempts", env: map[string]string{"ONCE_RECEIPT_ATTEMPTS": "1001"}, wantErr: []string{"ONCE_RECEIPT_ATTEMPTS"}},
		{name: "bad receipt retry queue", env: map[string]string{"ONCE_RECEIPT_RETRY_QUEUE": "r.fifo"}, wantErr: []string{"ONCE_RECEIPT_RETRY_QUEUE"}},
		{name: "settle below the provider timeout", env: map[string]string{"ONCE_PROVIDER_TIMEOUT": "10s", "ONCE_PROVIDER_SETTLE": "5s"}, wantErr: []string{"ONCE_PROVIDER_SETTLE"}},
		{name: "settle unset follows a long provider timeout", env: map[string]string{"ONCE_PROVIDER_TIMEOUT": "40s", "ONCE_LEASE": "1m"},
			want: with(func(c *Config) {
				c.ProviderTimeout, c.Lease, c.ProviderSettle = 40*time.Second, time.Minute, 40*time.Second
			})},
		{name: "fault injection true", env: map[string]string{"ONCE_FAULT_INJECTION": "TRUE"},
			want: with(func(c *Config) { c.FaultInjection = true })},
		{name: "fault injection 0", env: map[string]string{"ONCE_FAULT_INJECTION": "0"}, want: defaults},
		{name: "fault injection false", env: map[string]string{"ONCE_FAULT_INJECTION": "false"}, want: defaults},
		{name: "endpoint without region leaves it to the client", env: map[string]string{"DYNAMODB_ENDPOINT": "http://localhost:8111"},
			want: with(func(c *Config) { c.DynamoDBEndpoint = "http://localhost:8111" })},
		{name: "region without endpoint", env: map[string]string{"AWS_REGION": "eu-central-1"},
			want: with(func(c *Config) { c.Region = "eu-central-1" })},
		{name: "log level warn, upper case", env: map[string]string{"LOG_LEVEL": "WARN"},
			want: with(func(c *Config) { c.LogLevel = slog.LevelWarn })},
		{name: "surrounding spaces are ignored", env: map[string]string{"ONCE_RETENTION": " 2h "},
			want: with(func(c *Config) { c.Retention = 2 * time.Hour })},
		{name: "provider timeout not under the lease", env: map[string]string{"ONCE_LEASE": "5s", "ONCE_PROVIDER_TIMEOUT": "5s"},
			wantErr: []string{"ONCE_PROVIDER_TIMEOUT"}},
		{name: "provider auth in upper case, as a function URL's AuthType", env: map[string]string{"ONCE_PROVIDER_AUTH": "AWS_IAM"},
			want: with(func(c *Config) { c.ProviderAuth = ProviderAuthIAM })},
		{name: "provider auth none", env: map[string]string{"ONCE_PROVIDER_AUTH": "none"}, want: defaults},
		{name: "bad provider auth", env: map[string]string{"ONCE_PROVIDER_AUTH": "sigv4"}, wantErr: []string{"ONCE_PROVIDER_AUTH"}},
		{name: "bad provider timeout", env: map[string]string{"ONCE_PROVIDER_TIMEOUT": "-1s"}, wantErr: []string{"ONCE_PROVIDER_TIMEOUT"}},
		{name: "bad retention", env: map[string]string{"ONCE_RETENTION": "1 day"}, wantErr: []string{"ONCE_RETENTION"}},
		{name: "zero retention", env: map[string]string{"ONCE_RETENTION": "0s"}, wantErr: []string{"ONCE_RETENTION=\"0s\": must be positive"}},
		{name: "retention under an hour", env: map[string]string{"ONCE_RETENTION": "59m"},
			wantErr: []string{`ONCE_RETENTION="59m0s": must be at least 1h0m0s`}},
		{name: "retention of an hour", env: map[string]string{"ONCE_RETENTION": "1h"},
			want: with(func(c *Config) { c.Retention = time.Hour })},
		{name: "retention under a long lease", env: map[string]string{"ONCE_RETENTION": "90m", "ONCE_LEASE": "2h"},
			wantErr: []string{`ONCE_RETENTION="1h30m0s": must be at least 2h0m0s, the longest of 1h0m0s (the reconciler's retries of an UNKNOWN record), ONCE_LEASE (2h0m0s) and ONCE_PROVIDER_SETTLE (30s, `}},
		{name: "retention of a long lease", env: map[string]string{"ONCE_RETENTION": "2h", "ONCE_LEASE": "2h"},
			want: with(func(c *Config) { c.Retention, c.Lease = 2*time.Hour, 2*time.Hour })},
		{name: "retention under a long settle", env: map[string]string{"ONCE_RETENTION": "2h", "ONCE_PROVIDER_SETTLE": "3h"},
			wantErr: []string{`ONCE_RETENTION="2h0m0s": must be at least 3h0m0s, the longest of 1h0m0s (the reconciler's retries of an UNKNOWN record), ONCE_LEASE (30s) and ONCE_PROVIDER_SETTLE (3h0m0s,`}},
		{name: "retention of a long settle", env: map[string]string{"ONCE_RETENTION": "3h", "ONCE_PROVIDER_SETTLE": "3h"},
			want: with(func(c *Config) { c.Retention, c.ProviderSettle = 3*time.Hour, 3*time.Hour })},
		{name: "provider key retention not a duration", env: map[string]string{"ONCE_PROVIDER_KEY_RETENTION": "forever"},
			wantErr: []string{`ONCE_PROVIDER_KEY_RETENTION="forever": not a Go duration`}},
		{name: "provider key retention zero", env: map[string]string{"ONCE_PROVIDER_KEY_RETENTION": "0s"},
			wantErr: []string{`ONCE_PROVIDER_KEY_RETENTION="0s": must be positive`}},
		{name: "provider key retention under its floor", env: map[string]string{"ONCE_PROVIDER_KEY_RETENTION": "2h0m59s"},
			wantErr: []string{`ONCE_PROVIDER_KEY_RETENTION="2h0m59s": must be at least 2h1m0s: ONCE_LEASE (30s) + ONCE_PROVIDER_SETTLE (30s) + 1h0m0s (the reconciler's retries) + 1h0m0s (the margin`}},
		{name: "provider key retention at its floor", env: map[string]string{"ONCE_PROVIDER_KEY_RETENTION": "2h1m"},
			want: with(func(c *Config) { c.ProviderKeyRetention = 2*time.Hour + time.Minute })},
		{name: "provider key retention of Stripe under a long lease", env: map[string]string{"ONCE_LEASE": "23h", "ONCE_PROVIDER_TIMEOUT": "10s"},
			wantErr: []string{`ONCE_PROVIDER_KEY_RETENTION="24h0m0s": must be at least 25h0m30s: ONCE_LEASE (23h0m0s) + ONCE_PROVIDER_SETTLE (30s)`}},
		{name: "provider key retention under a long settle", env: map[string]string{"ONCE_PROVIDER_SETTLE": "22h30m", "ONCE_PROVIDER_KEY_RETENTION": "24h30m"},
			wantErr: []string{`ONCE_PROVIDER_KEY_RETENTION="24h30m0s": must be at least 24h30m30s`}},
		{name: "provider key retention over a long settle", env: map[string]string{"ONCE_PROVIDER_SETTLE": "22h30m", "ONCE_PROVIDER_KEY_RETENTION": "25h31m"},
			want: with(func(c *Config) {
				c.ProviderSettle, c.ProviderKeyRetention = 22*time.Hour+30*time.Minute, 25*time.Hour+31*time.Minute
			})},
		{name: "negative lease", env: map[string]string{"ONCE_LEASE": "-1s"}, wantErr: []string{"ONCE_LEASE"}},
		{name: "bare number lease", env: map[string]string{"ONCE_LEASE": "30"}, wantErr: []string{"ONCE_LEASE"}},
		{name: "bad fault injection", env: map[string]string{"ONCE_FAULT_INJECTION": "yes"}, wantErr: []string{"ONCE_FAULT_INJECTION"}},
		{name: "bad log level", env: map[string]string{"LOG_LEVEL": "verbose"}, wantErr: []string{"LOG_LEVEL"}},
		{name: "endpoint without scheme", env: map[string]string{"DYNAMODB_ENDPOINT": "localhost:8000"}, wantErr: []string{"DYNAMODB_ENDPOINT"}},
		{name: "provider URL not absolute", env: map[string]string{"ONCE_PROVIDER_URL": "/v1"}, wantErr: []string{"ONCE_PROVIDER_URL"}},
		{name: "mail URL not absolute", env: map[string]string{"ONCE_MAIL_URL": "mail.example.com"}, wantErr: []string{"ONCE_MAIL_URL"}},
		{name: "bad mail auth", env: map[string]string{"ONCE_MAIL_AUTH": "basic"}, wantErr: []string{"ONCE_MAIL_AUTH"}},
		{
			name: "every problem at once",
			env: map[string]string{
				"ONCE_RETENTION":       "forever",
				"ONCE_LEASE":           "0",
				"ONCE_FAULT_INJECTION": "maybe",
				"LOG_LEVEL":            "loud",
				"DYNAMODB_ENDPOINT":    "ftp://host",
			},
			wantErr: []string{"ONCE_RETENTION", "ONCE_LEASE", "ONCE_FAULT_INJECTION", "LOG_LEVEL", "DYNAMODB_ENDPOINT"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromEnv(func(k string) string { return tt.env[k] })
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("FromEnv() = %+v, nil; want an error naming %v", got, tt.wantErr)
				}
				lines := strings.Split(err.Error(), "\n")
				if len(lines) != len(tt.wantErr) {
					t.Errorf("FromEnv() reported %d problems, want %d:\n%v", len(lines), len(tt.wantErr), err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("FromEnv() error = %q, want it to mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("FromEnv() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreUnexported(Config{})); diff != "" {
				t.Errorf("FromEnv() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTable(t *testing.T) {
	tests := []struct {
		id, env, def string
	}{
		{"IdempotencyTable", "ONCE_IDEMPOTENCY_TABLE", "once-idempotency"},
		{"ApiKeysTable", "ONCE_API_KEYS_TABLE", "once-api-keys"},
		{"APIKeysTable", "ONCE_API_KEYS_TABLE", "once-api-keys"},
		{"WorkerRetry2Table", "ONCE_WORKER_RETRY2_TABLE", "once-worker-retry2"},
		{"NotesTable", "ONCE_NOTES_TABLE", "once-notes"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if got := TableEnv(tt.id); got != tt.env {
				t.Errorf("TableEnv(%q) = %q, want %q", tt.id, got, tt.env)
			}
			if got := TableDefault(tt.id); got != tt.def {
				t.Errorf("TableDefault(%q) = %q, want %q", tt.id, got, tt.def)
			}
			unset, err := FromEnv(func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if got := unset.Table(tt.id); got != tt.def {
				t.Errorf("Table(%q) unset = %q, want the default %q", tt.id, got, tt.def)
			}
			if got := (Config{}).Table(tt.id); got != tt.def {
				t.Errorf("Config{}.Table(%q) = %q, want the default %q", tt.id, got, tt.def)
			}
			set, err := FromEnv(func(k string) string { return map[string]string{tt.env: " stack-x "}[k] })
			if err != nil {
				t.Fatal(err)
			}
			if got := set.Table(tt.id); got != "stack-x" {
				t.Errorf("Table(%q) with %s set = %q, want stack-x", tt.id, tt.env, got)
			}
		})
	}
}

func TestCheckTables(t *testing.T) {
	env := map[string]string{"ONCE_PAYMENTS_TABLE": "a b", "ONCE_IDEMPOTENCY_TABLE": "ab", "ONCE_ORDERS_TABLE": "stack-orders"}
	getenv := func(k string) string { return env[k] }
	if _, err := FromEnv(getenv); err != nil {
		t.Fatalf("FromEnv() error = %v; table names are checked by CheckTables", err)
	}
	if err := CheckTables(getenv, "OrdersTable", "RefundsTable"); err != nil {
		t.Errorf("CheckTables(set, default) = %v, want nil", err)
	}
	err := CheckTables(getenv, "PaymentsTable", "OrdersTable", "IdempotencyTable")
	if err == nil {
		t.Fatal("CheckTables(bad names) = nil, want an error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		`config: ONCE_PAYMENTS_TABLE="a b": not a DynamoDB table name (3-255 characters of a-z A-Z 0-9 _ . -)`,
		`config: ONCE_IDEMPOTENCY_TABLE="ab": not a DynamoDB table name (3-255 characters of a-z A-Z 0-9 _ . -)`,
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("CheckTables() mismatch (-want +got):\n%s", diff)
	}
}
