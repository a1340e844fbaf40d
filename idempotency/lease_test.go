package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
)

// TestLeaseShorterThanDeadlineWarns: a request whose context's deadline
// leaves it longer to run than its lease (less LeaseMargin) is served, and
// the Middleware logs one structured warning, naming the route, the lease
// and the time left, never the key; later requests log nothing more. A
// deadline the lease covers, no deadline, and Atomic mode (no lease held
// while the handler runs) log nothing.
func TestLeaseShorterThanDeadlineWarns(t *testing.T) {
	tests := []struct {
		name     string
		mode     idempotency.Mode
		lease    time.Duration
		deadline time.Duration // from now; 0: none
		want     int           // warnings after three requests
	}{
		{"leased, deadline past the lease", idempotency.Leased, 2 * time.Second, time.Hour, 1},
		{"external, deadline past the lease", idempotency.External, 2 * time.Second, time.Hour, 1},
		{"within the margin", idempotency.Leased, 10 * time.Second, 10*time.Second - idempotency.LeaseMargin/2, 1},
		{"covered by the lease", idempotency.Leased, idempotency.DefaultLease, 10 * time.Second, 0},
		{"no deadline", idempotency.Leased, 2 * time.Second, 0, 0},
		{"atomic", idempotency.Atomic, 2 * time.Second, time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			mw, err := idempotency.New(idempotency.Config{
				Store:  memory.New(),
				Tenant: func(*http.Request) (string, bool) { return "acme", true },
				Lease:  tt.lease,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			h := wrap(mw, tt.mode, "POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); !ok {
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			for _, key := range []string{"secret-key-1", "secret-key-2", "secret-key-3"} {
				ctx := t.Context()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				r := httptest.NewRequestWithContext(ctx, "POST", "/v1/things", strings.NewReader(`{}`))
				r.Header.Set(idempotency.Header, key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusCreated {
					t.Fatalf("status = %d %s, want 201 (served, whatever the lease)", w.Code, w.Body)
				}
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if logs.Len() == 0 {
				lines = nil
			}
			if len(lines) != tt.want {
				t.Fatalf("%d log lines, want %d:\n%s", len(lines), tt.want, logs.String())
			}
			if tt.want == 0 {
				return
			}
			if strings.Contains(logs.String(), "secret-key") {
				t.Errorf("the warning holds an idempotency key: %s", logs.String())
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
				t.Fatalf("log line %q: %v", lines[0], err)
			}
			delete(got, "time")
			delete(got, "msg")
			deadlineIn, _ := got["deadline_in"].(string)
			delete(got, "deadline_in")
			want := map[string]any{"level": "WARN", "route": "POST /v1/things", "lease": tt.lease.String(), "lease_margin": idempotency.LeaseMargin.String()}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("warning mismatch (-want +got):\n%s", diff)
			}
			if d, err := time.ParseDuration(deadlineIn); err != nil || d <= 0 || d > tt.deadline {
				t.Errorf("deadline_in = %q, want the time left before the deadline (at most %v)", deadlineIn, tt.deadline)
			}
		})
	}
}
