package sqsqueue_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/recovery/sqsqueue"
	"github.com/oncehq/once/internal/sqslocal"
	"github.com/oncehq/once/internal/sqstest"
)

var _ recovery.Queue = (*sqsqueue.Queue)(nil)

// TestMaxDelay: the queue's cap is the one the recovery functions plan with.
func TestMaxDelay(t *testing.T) {
	if sqsqueue.MaxDelay != recovery.MaxDelay {
		t.Errorf("sqsqueue.MaxDelay = %v, want recovery.MaxDelay (%v)", sqsqueue.MaxDelay, recovery.MaxDelay)
	}
}

// wire is a local SQS endpoint that records the DelaySeconds of every
// SendMessage it is sent, as the SDK put it on the wire.
type wire struct {
	mu     sync.Mutex
	delays []int
}

func (w *wire) serve(t *testing.T) string {
	t.Helper()
	local := sqslocal.New(sqslocal.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.SendMessage" {
			var in struct{ DelaySeconds int } // absent (the SDK omits 0): 0
			if err := json.Unmarshal(body, &in); err != nil {
				http.Error(rw, err.Error(), http.StatusBadRequest)
				return
			}
			w.mu.Lock()
			w.delays = append(w.delays, in.DelaySeconds)
			w.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		local.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (w *wire) last() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.delays...)
}

// client returns NewClient's client on endpoint, as a function configured
// with SQS_ENDPOINT gets it.
func client(t *testing.T, endpoint string) *sqs.Client {
	t.Helper()
	t.Setenv("SQS_ENDPOINT", endpoint)
	t.Setenv("AWS_REGION", "")
	c, err := sqsqueue.NewClient(t.Context())
	if err != nil {
		t.Fatalf("NewClient() = %v", err)
	}
	return c
}

// TestSend sends through the SDK over HTTP to the local SQS endpoint: each
// delay goes out as SQS's DelaySeconds (rounded up, capped at MaxDelay, never
// an error), and the message is held that long.
func TestSend(t *testing.T) {
	var w wire
	endpoint := w.serve(t)
	c, poll := client(t, endpoint), sqstest.Client(t, endpoint)
	tests := []struct {
		name  string
		delay time.Duration
		want  int // DelaySeconds on the wire
	}{
		{"negative", -time.Second, 0},
		{"none", 0, 0},
		{"a millisecond rounds up", time.Millisecond, 1},
		{"a second and a half", 1500 * time.Millisecond, 2},
		{"just under the cap", 14*time.Minute + 59100*time.Millisecond, 900},
		{"the cap", sqsqueue.MaxDelay, 900},
		{"an hour: the cap", time.Hour, 900},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sqsqueue.DelaySeconds(tt.delay); got != int32(tt.want) {
				t.Errorf("DelaySeconds(%v) = %d, want %d", tt.delay, got, tt.want)
			}
			url := sqstest.Queue(t, poll, fmt.Sprintf("send-%d", i), nil)
			q, err := sqsqueue.New(c, url)
			if err != nil {
				t.Fatal(err)
			}
			if q.URL() != url {
				t.Errorf("URL() = %q, want %q", q.URL(), url)
			}
			before := len(w.last())
			if err := q.Send(t.Context(), "check "+tt.name, tt.delay); err != nil {
				t.Fatalf("Send(%v) = %v, want nil", tt.delay, err)
			}
			if got := w.last()[before:]; !cmp.Equal(got, []int{tt.want}) {
				t.Errorf("Send(%v) sent DelaySeconds %v, want [%d]", tt.delay, got, tt.want)
			}
			got := sqstest.Receive(t, poll, url, 0, false)
			if tt.want == 0 {
				if len(got) != 1 || aws.ToString(got[0].Body) != "check "+tt.name {
					t.Errorf("received at once %d messages, want the one sent", len(got))
				}
				return
			}
			if len(got) != 0 {
				t.Fatalf("received at once %d messages, want the message delayed %ds", len(got), tt.want)
			}
			if _, _, delayed := sqstest.Counts(t, poll, url); delayed != "1" {
				t.Errorf("ApproximateNumberOfMessagesDelayed = %s, want 1", delayed)
			}
			if tt.want <= 2 {
				if got := sqstest.Receive(t, poll, url, 10*time.Second, false); len(got) != 1 {
					t.Errorf("received after the delay %d messages, want 1", len(got))
				}
			}
		})
	}
}

// TestSendFails: a queue that does not exist is the SDK's error, wrapped.
func TestSendFails(t *testing.T) {
	c := client(t, sqstest.Endpoint(t))
	url := sqstest.Queue(t, c, "gone", nil)
	q, err := sqsqueue.New(c, url+"-missing")
	if err != nil {
		t.Fatal(err)
	}
	err = q.Send(t.Context(), "check", 0)
	var missing *types.QueueDoesNotExist
	if !errors.As(err, &missing) || !strings.HasPrefix(err.Error(), "sqsqueue: send: ") {
		t.Errorf("Send() to a missing queue = %v, want sqsqueue: send: wrapping QueueDoesNotExist", err)
	}
}

// wrappedAPI is an API of a user's own, such as a wrapper that counts calls.
type wrappedAPI struct{ sqsqueue.API }

// TestNew: what cannot be a queue is refused when the function starts, with
// the cause named.
func TestNew(t *testing.T) {
	c := client(t, sqstest.Endpoint(t))
	tests := []struct {
		name string
		api  sqsqueue.API
		url  string
		want []string // what the error names; none: no error
	}{
		{"a queue URL", c, "https://sqs.us-east-1.amazonaws.com/123456789012/checks", nil},
		{"a local queue URL", c, "http://127.0.0.1:9324/000000000000/checks", nil},
		{"no URL (a variable not set)", c, "", []string{`queue URL ""`, "absolute http(s) URL"}},
		{"a queue name", c, "checks", []string{`queue URL "checks"`}},
		{"another scheme", c, "sqs://checks", []string{`"sqs://checks"`}},
		{"no client", nil, "http://127.0.0.1:9324/000000000000/checks", []string{"SQS client is nil"}},
		{"a nil *sqs.Client (NewClient's on an error)", (*sqs.Client)(nil), "http://127.0.0.1:9324/000000000000/checks", []string{"SQS client is nil"}},
		{"a nil pointer of another API", (*wrappedAPI)(nil), "http://127.0.0.1:9324/000000000000/checks", []string{"SQS client is nil"}},
		{"neither", nil, "", []string{"SQS client is nil", `queue URL ""`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := sqsqueue.New(tt.api, tt.url)
			if tt.want == nil {
				if err != nil || q == nil {
					t.Errorf("New(%q) = %v, %v; want a queue", tt.url, q, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New(%q) = nil error, want one naming %q", tt.url, tt.want)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("New(%q) = %q, want it to name %q", tt.url, err, s)
				}
			}
		})
	}
}

// TestNewClient: SQS_ENDPOINT that is not an endpoint is refused at once,
// naming the variable; one that is works without AWS_REGION.
func TestNewClient(t *testing.T) {
	endpoint := sqstest.Endpoint(t)
	tests := []struct {
		name, endpoint string
		want           string // what the error names; empty: no error
	}{
		{"the local endpoint", endpoint, ""},
		{"no scheme", strings.TrimPrefix(endpoint, "http://"), `SQS_ENDPOINT="` + strings.TrimPrefix(endpoint, "http://") + `"`},
		{"not a URL", "::", `SQS_ENDPOINT="::"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("SQS_ENDPOINT", tt.endpoint)
			t.Setenv("AWS_REGION", "")
			c, err := sqsqueue.NewClient(t.Context())
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("NewClient() with SQS_ENDPOINT=%q = %v, want an error naming %s", tt.endpoint, err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewClient() = %v", err)
			}
			if _, err := c.ListQueues(t.Context(), &sqs.ListQueuesInput{}); err != nil {
				t.Errorf("ListQueues through NewClient's client = %v, want nil", err)
			}
		})
	}
}
