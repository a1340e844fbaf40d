package provider_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
)

var now = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// env is a simulator on fresh tables, served over HTTP.
type env struct {
	client *provider.Client
	sim    *simulator.Server
	srv    *httptest.Server
	newSim func() *simulator.Server
}

func newEnv(t *testing.T, timeout time.Duration) *env {
	t.Helper()
	db := dynamotest.Client(t)
	table := dynamotest.Tables(t, db).ByLogicalID["ProviderTable"]
	e := &env{newSim: func() *simulator.Server {
		return simulator.New(simulator.Options{
			DB: db, Table: table,
			Now:       func() time.Time { return now },
			SlowDelay: 100 * time.Millisecond,
			HoldFor:   5 * time.Second,
		})
	}}
	e.sim = e.newSim()
	e.srv = httptest.NewServer(e.sim)
	t.Cleanup(e.srv.Close)
	e.client = provider.New(e.srv.URL, &http.Client{Timeout: timeout})
	return e
}

func (e *env) count(t *testing.T, key string) int {
	t.Helper()
	n, err := e.sim.Count(t.Context(), key)
	if err != nil {
		t.Fatalf("Count(%q): %v", key, err)
	}
	return n
}

func request(source string) provider.ChargeRequest {
	return provider.ChargeRequest{Amount: 1999, Currency: "usd", Source: source, Customer: "cus_1",
		Description: "order 7", Metadata: map[string]string{"order": "7"}}
}

func TestChargeSucceeds(t *testing.T) {
	e := newEnv(t, 2*time.Second)
	for _, source := range []string{simulator.TokenVisa, simulator.TokenSlow} {
		t.Run(source, func(t *testing.T) {
			key := "ok-" + source
			got, err := e.client.Charge(t.Context(), key, request(source))
			if err != nil {
				t.Fatalf("Charge(%q) = %v, want success", key, err)
			}
			want := provider.Charge{ID: got.ID, Status: provider.StatusSucceeded, Amount: 1999, Currency: "usd", Created: now}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Charge(%q) mismatch (-want +got):\n%s", key, diff)
			}
			// A retry with the same key replays the charge.
			again, err := e.client.Charge(t.Context(), key, request(source))
			if err != nil || again != got {
				t.Errorf("Charge(%q) again = %+v, %v; want %+v", key, again, err, got)
			}
			found, err := e.client.Lookup(t.Context(), key)
			if err != nil || found != got {
				t.Errorf("Lookup(%q) = %+v, %v; want %+v", key, found, err, got)
			}
			if n := e.count(t, key); n != 1 {
				t.Errorf("count = %d, want 1", n)
			}
		})
	}
}

func TestChargeDeclined(t *testing.T) {
	e := newEnv(t, 2*time.Second)
	for range 2 { // the decline is recorded and replayed
		_, err := e.client.Charge(t.Context(), "declined", request(simulator.TokenDeclined))
		var declined *provider.DeclinedError
		if !errors.As(err, &declined) {
			t.Fatalf("Charge = %v, want a *DeclinedError", err)
		}
		if errors.Is(err, provider.ErrNotCharged) || errors.Is(err, provider.ErrOutcomeUnknown) {
			t.Errorf("Charge = %v, want neither ErrNotCharged nor ErrOutcomeUnknown", err)
		}
		want := provider.Charge{ID: declined.Charge.ID, Status: provider.StatusFailed, Amount: 1999, Currency: "usd", FailureCode: "card_declined"}
		if declined.Code != "card_declined" || declined.Charge.ID == "" || !cmp.Equal(declined.Charge, want) {
			t.Errorf("DeclinedError = %+v, want code card_declined and charge %+v", declined, want)
		}
		found, err := e.client.Lookup(t.Context(), "declined")
		want.Created = now
		if err != nil || found != want {
			t.Errorf("Lookup = %+v, %v; want %+v", found, err, want)
		}
	}
	if n := e.count(t, "declined"); n != 1 {
		t.Errorf("count = %d, want 1", n)
	}
}

func TestChargeUnavailable(t *testing.T) {
	e := newEnv(t, 2*time.Second)
	_, err := e.client.Charge(t.Context(), "unavailable", request(simulator.TokenUnavailable))
	if !errors.Is(err, provider.ErrNotCharged) {
		t.Fatalf("Charge = %v, want ErrNotCharged", err)
	}
	if n := e.count(t, "unavailable"); n != 0 {
		t.Errorf("count = %d, want 0", n)
	}
	if _, err := e.client.Lookup(t.Context(), "unavailable"); !errors.Is(err, provider.ErrNoCharge) {
		t.Errorf("Lookup = %v, want ErrNoCharge", err)
	}
}

// TestChargeTimeout is the crash window: the provider charged, the answer
// never came. Lookup and a retry both find the one charge.
func TestChargeTimeout(t *testing.T) {
	// The timeout leaves time to record the charge (DynamoDB Local on a
	// loaded machine), and is well short of the 5s hold.
	const timeout = time.Second
	e := newEnv(t, timeout)
	h2 := httptest.NewUnstartedServer(e.sim)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	h2Client := h2.Client()
	h2Client.Timeout = timeout

	for _, tt := range []struct {
		name   string
		client *provider.Client
	}{
		{"HTTP/1.1", e.client},
		{"HTTP/2", provider.New(h2.URL, h2Client)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "timeout-" + tt.name
			_, err := tt.client.Charge(t.Context(), key, request(simulator.TokenTimeout))
			if !errors.Is(err, provider.ErrOutcomeUnknown) || errors.Is(err, provider.ErrNotCharged) {
				t.Fatalf("Charge = %v, want ErrOutcomeUnknown", err)
			}
			found, err := tt.client.Lookup(t.Context(), key)
			if err != nil || found.Status != provider.StatusSucceeded || found.ID == "" {
				t.Fatalf("Lookup = %+v, %v; want the succeeded charge", found, err)
			}
			if n := e.count(t, key); n != 1 {
				t.Errorf("count = %d, want 1", n)
			}
			again, err := tt.client.Charge(t.Context(), key, request(simulator.TokenTimeout))
			if err != nil || again != found {
				t.Errorf("Charge again = %+v, %v; want the replay %+v", again, err, found)
			}
			if n := e.count(t, key); n != 1 {
				t.Errorf("count after the retry = %d, want 1", n)
			}
		})
	}
}

func TestChargeKeyReused(t *testing.T) {
	e := newEnv(t, 2*time.Second)
	if _, err := e.client.Charge(t.Context(), "reused", request(simulator.TokenVisa)); err != nil {
		t.Fatal(err)
	}
	other := request(simulator.TokenVisa)
	other.Amount++
	_, err := e.client.Charge(t.Context(), "reused", other)
	var se *provider.StatusError
	if !errors.As(err, &se) || se.StatusCode != 422 || se.Code != "idempotency_key_reused" {
		t.Fatalf("Charge with other parameters = %v, want a 422 idempotency_key_reused *StatusError", err)
	}
	// A charge exists under the key: neither "not charged" nor "rejected".
	if errors.Is(err, provider.ErrNotCharged) || errors.Is(err, provider.ErrOutcomeUnknown) || errors.Is(err, provider.ErrRejected) {
		t.Errorf("Charge = %v, want none of ErrNotCharged, ErrOutcomeUnknown, ErrRejected", err)
	}
	if n := e.count(t, "reused"); n != 1 {
		t.Errorf("count = %d, want 1", n)
	}
}

// TestChargeRejected: the simulator refuses a source token it does not know;
// the error is final, and its text leaves out the provider's message, which
// names the token.
func TestChargeRejected(t *testing.T) {
	e := newEnv(t, 2*time.Second)
	_, err := e.client.Charge(t.Context(), "rejected", request("tok_mastercard"))
	var se *provider.StatusError
	if !errors.As(err, &se) || !errors.Is(err, provider.ErrRejected) {
		t.Fatalf("Charge(tok_mastercard) = %v, want a *StatusError matching ErrRejected", err)
	}
	if got, want := err.Error(), "provider: charge: status 400: invalid_request"; got != want {
		t.Errorf("Charge(tok_mastercard) error = %q, want %q", got, want)
	}
	if !strings.Contains(se.Message, "tok_mastercard") {
		t.Errorf("StatusError.Message = %q, want the provider's message, naming the token", se.Message)
	}
	if n := e.count(t, "rejected"); n != 0 {
		t.Errorf("count = %d, want 0", n)
	}
}

func TestStatusError(t *testing.T) {
	const message = `unknown source token "tok_secret"`
	tests := []struct {
		err          *provider.StatusError
		want         string
		wantRejected bool
	}{
		{&provider.StatusError{StatusCode: 400, Code: "invalid_request", Message: message}, "status 400: invalid_request", true},
		{&provider.StatusError{StatusCode: 400, Message: message}, "status 400", true},
		{&provider.StatusError{StatusCode: 413}, "status 413", true},
		{&provider.StatusError{StatusCode: 422, Code: "unprocessable", Message: message}, "status 422: unprocessable", true},
		// A charge exists under the key: not a rejection of the request.
		{&provider.StatusError{StatusCode: 422, Code: "idempotency_key_reused", Message: message}, "status 422: idempotency_key_reused", false},
		{&provider.StatusError{StatusCode: 400, Code: "idempotency_error"}, "status 400: idempotency_error", false},
		{&provider.StatusError{StatusCode: 401, Code: "invalid_api_key", Message: message}, "status 401: invalid_api_key", false},
		{&provider.StatusError{StatusCode: 403}, "status 403", false},
		{&provider.StatusError{StatusCode: 404, Code: "resource_missing"}, "status 404: resource_missing", false},
		{&provider.StatusError{StatusCode: 408}, "status 408", false},
		{&provider.StatusError{StatusCode: 409, Code: "idempotency_key_in_use"}, "status 409: idempotency_key_in_use", false},
		{&provider.StatusError{StatusCode: 429}, "status 429", false},
		{&provider.StatusError{StatusCode: 500}, "status 500", false},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			wrapped := fmt.Errorf("provider: charge: %w", tt.err)
			if got := errors.Is(wrapped, provider.ErrRejected); got != tt.wantRejected {
				t.Errorf("errors.Is(%v, ErrRejected) = %v, want %v", wrapped, got, tt.wantRejected)
			}
			for _, other := range []error{provider.ErrNotCharged, provider.ErrOutcomeUnknown, provider.ErrNoCharge} {
				if errors.Is(wrapped, other) {
					t.Errorf("errors.Is(%v, %v) = true, want false", wrapped, other)
				}
			}
		})
	}
}

func TestChargeConcurrent(t *testing.T) {
	e := newEnv(t, 5*time.Second)
	const n = 20
	charges := make([]provider.Charge, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { charges[i], errs[i] = e.client.Charge(t.Context(), "concurrent", request(simulator.TokenVisa)) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || charges[i] != charges[0] {
			t.Errorf("Charge %d = %+v, %v; want %+v", i, charges[i], errs[i], charges[0])
		}
	}
	if got := e.count(t, "concurrent"); got != 1 {
		t.Errorf("count = %d, want 1", got)
	}
}

func TestRestart(t *testing.T) {
	e := newEnv(t, 2*time.Second)
	first, err := e.client.Charge(t.Context(), "restart", request(simulator.TokenVisa))
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Close()
	e.sim = e.newSim()
	srv := httptest.NewServer(e.sim)
	t.Cleanup(srv.Close)
	client := provider.New(srv.URL+"/", nil) // a trailing slash is fine
	again, err := client.Charge(t.Context(), "restart", request(simulator.TokenVisa))
	if err != nil || again != first {
		t.Errorf("Charge after a restart = %+v, %v; want %+v", again, err, first)
	}
	if n := e.count(t, "restart"); n != 1 {
		t.Errorf("count = %d, want 1", n)
	}
}

func TestLookupMissing(t *testing.T) {
	e := newEnv(t, 2*time.Second)
	_, err := e.client.Lookup(t.Context(), "never-used")
	if !errors.Is(err, provider.ErrNoCharge) {
		t.Errorf("Lookup = %v, want ErrNoCharge", err)
	}
}

// closedURL returns the URL of a port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestChargeNotSent(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		c := provider.New(closedURL(t), &http.Client{Timeout: time.Second})
		_, err := c.Charge(t.Context(), "k", request(simulator.TokenVisa))
		if !errors.Is(err, provider.ErrNotCharged) {
			t.Errorf("Charge = %v, want ErrNotCharged", err)
		}
	})
	t.Run("context done before sending", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.Error("the request reached the server")
		}))
		defer srv.Close()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := provider.New(srv.URL, nil).Charge(ctx, "k", request(simulator.TokenVisa))
		if !errors.Is(err, provider.ErrNotCharged) || !errors.Is(err, context.Canceled) {
			t.Errorf("Charge = %v, want ErrNotCharged wrapping context.Canceled", err)
		}
	})
	t.Run("lookup, connection refused", func(t *testing.T) {
		c := provider.New(closedURL(t), &http.Client{Timeout: time.Second})
		_, err := c.Lookup(t.Context(), "k")
		if err == nil || errors.Is(err, provider.ErrNoCharge) {
			t.Errorf("Lookup = %v, want a plain error", err)
		}
	})
}

// resetServer reads each request in full, then resets the connection.
func resetServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			req, err := http.ReadRequest(bufio.NewReader(conn))
			if err == nil {
				_, _ = io.Copy(io.Discard, req.Body)
			}
			_ = conn.(*net.TCPConn).SetLinger(0) // close with RST
			conn.Close()
		}
	})
	return "http://" + l.Addr().String()
}

func TestChargeReset(t *testing.T) {
	c := provider.New(resetServer(t), &http.Client{Timeout: 2 * time.Second})
	_, err := c.Charge(t.Context(), "k", request(simulator.TokenVisa))
	if !errors.Is(err, provider.ErrOutcomeUnknown) || errors.Is(err, provider.ErrNotCharged) {
		t.Errorf("Charge = %v, want ErrOutcomeUnknown", err)
	}
}

// TestClassification runs Charge and Lookup against canned answers.
func TestClassification(t *testing.T) {
	const okCharge = `{"id":"prch_1","object":"charge","status":"succeeded","amount":1999,"currency":"usd","created":1893553445,"idempotency_key":"k"}`
	tests := []struct {
		name   string
		status int
		body   string
		// want: "ok", "declined", "not-charged", "unknown", "no-charge",
		// "rejected" (a *StatusError matching ErrRejected), "status" (another
		// *StatusError)
		charge, lookup string
	}{
		{"201 charge", 201, okCharge, "ok", "status"},
		{"200 charge", 200, okCharge, "ok", "ok"},
		{"201 failed charge", 201, `{"id":"prch_1","object":"charge","status":"failed","failure_code":"card_declined","idempotency_key":"k"}`, "declined", "status"},
		{"201 pending charge", 201, `{"id":"prch_1","object":"charge","status":"pending","idempotency_key":"k"}`, "unknown", "status"},
		{"201 another key's charge", 201, `{"id":"prch_1","object":"charge","status":"succeeded","idempotency_key":"other"}`, "unknown", "status"},
		{"201 garbage", 201, `<html>`, "unknown", "status"},
		{"201 empty", 201, ``, "unknown", "status"},
		{"402 decline", 402, `{"error":{"type":"card_error","code":"card_declined","message":"no","charge":"prch_1"}}`, "declined", "status"},
		{"402 garbage", 402, `oops`, "unknown", "status"},
		{"302", 302, ``, "unknown", "status"},
		{"400", 400, `{"error":{"code":"invalid_request","message":"bad"}}`, "rejected", "rejected"},
		{"401", 401, `{"message":"Unauthorized"}`, "status", "status"},
		{"403", 403, ``, "status", "status"},
		{"404 resource_missing", 404, `{"error":{"code":"resource_missing"}}`, "status", "no-charge"},
		{"404 from elsewhere", 404, `404 page not found`, "status", "status"},
		{"408", 408, ``, "status", "status"},
		{"409", 409, ``, "status", "status"},
		{"413", 413, ``, "rejected", "rejected"},
		{"422", 422, `{"error":{"code":"unprocessable"}}`, "rejected", "rejected"},
		{"422 key reused", 422, `{"error":{"code":"idempotency_key_reused"}}`, "status", "status"},
		{"429", 429, ``, "not-charged", "status"},
		{"500", 500, `{"message":"Internal Server Error"}`, "unknown", "status"},
		{"502", 502, ``, "unknown", "status"},
		{"503", 503, ``, "not-charged", "status"},
		{"504", 504, `{"message":"Endpoint request timed out"}`, "unknown", "status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			c := provider.New(srv.URL, nil)
			_, err := c.Charge(t.Context(), "k", request(simulator.TokenVisa))
			if got := classify(err); got != tt.charge {
				t.Errorf("Charge = %v (%s), want %s", err, got, tt.charge)
			}
			_, err = c.Lookup(t.Context(), "k")
			if got := classify(err); got != tt.lookup {
				t.Errorf("Lookup = %v (%s), want %s", err, got, tt.lookup)
			}
		})
	}
}

func classify(err error) string {
	var declined *provider.DeclinedError
	var se *provider.StatusError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &declined):
		return "declined"
	case errors.Is(err, provider.ErrNotCharged):
		return "not-charged"
	case errors.Is(err, provider.ErrOutcomeUnknown):
		return "unknown"
	case errors.Is(err, provider.ErrNoCharge):
		return "no-charge"
	case errors.Is(err, provider.ErrNotRefunded):
		return "not-refunded"
	case errors.Is(err, provider.ErrNoRefund):
		return "no-refund"
	case errors.Is(err, provider.ErrRejected) && errors.As(err, &se):
		return "rejected"
	case errors.As(err, &se):
		return "status"
	}
	return "plain"
}
