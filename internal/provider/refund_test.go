package provider_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
)

// charged makes a succeeded charge of 1999 with source under key.
func (e *env) charged(t *testing.T, key, source string) provider.Charge {
	t.Helper()
	c, err := e.client.Charge(t.Context(), key, request(source))
	if err != nil {
		t.Fatalf("Charge(%s): %v", source, err)
	}
	return c
}

func TestRefund(t *testing.T) {
	e := newEnv(t, 2*time.Second)
	c := e.charged(t, "charge-refunded", simulator.TokenVisa)

	req := provider.RefundRequest{Charge: c.ID, Amount: 500, Reason: "requested_by_customer", Metadata: map[string]string{"ticket": "9"}}
	first, err := e.client.Refund(t.Context(), "refund-1", req)
	if err != nil {
		t.Fatalf("Refund = %v", err)
	}
	want := provider.Refund{ID: first.ID, Charge: c.ID, Status: provider.StatusSucceeded, Amount: 500, Currency: "usd", Created: now}
	if diff := cmp.Diff(want, first); diff != "" || len(first.ID) < 6 || first.ID[:5] != "prre_" {
		t.Errorf("Refund (-want +got):\n%s (id %q)", diff, first.ID)
	}

	t.Run("same key, same request: the same refund", func(t *testing.T) {
		again, err := e.client.Refund(t.Context(), "refund-1", req)
		if err != nil || again != first {
			t.Errorf("Refund again = %+v, %v; want %+v", again, err, first)
		}
	})
	t.Run("same key, another request: 422, not rejected", func(t *testing.T) {
		other := req
		other.Amount = 501
		_, err := e.client.Refund(t.Context(), "refund-1", other)
		var se *provider.StatusError
		if !errors.As(err, &se) || se.StatusCode != 422 || se.Code != "idempotency_key_reused" || errors.Is(err, provider.ErrRejected) {
			t.Errorf("Refund with other parameters = %v, want 422 idempotency_key_reused", err)
		}
	})
	t.Run("lookup by key", func(t *testing.T) {
		got, err := e.client.LookupRefund(t.Context(), "refund-1")
		if err != nil || got != first {
			t.Errorf("LookupRefund = %+v, %v; want %+v", got, err, first)
		}
		if _, err := e.client.LookupRefund(t.Context(), "refund-never"); !errors.Is(err, provider.ErrNoRefund) {
			t.Errorf("LookupRefund(unused key) = %v, want ErrNoRefund", err)
		}
	})
	t.Run("never more than the charge", func(t *testing.T) {
		big := provider.RefundRequest{Charge: c.ID, Amount: 1999 - 500 + 1}
		_, err := e.client.Refund(t.Context(), "refund-2", big)
		if classify(err) != "rejected" {
			t.Errorf("Refund of more than is left = %v, want rejected", err)
		}
		rest := provider.RefundRequest{Charge: c.ID, Amount: 1999 - 500}
		if _, err := e.client.Refund(t.Context(), "refund-2", rest); err != nil {
			t.Errorf("Refund of the rest under the refused key = %v, want it made (a refusal is not recorded)", err)
		}
		if _, err := e.client.Refund(t.Context(), "refund-3", provider.RefundRequest{Charge: c.ID, Amount: 1}); classify(err) != "rejected" {
			t.Errorf("Refund of a refunded charge = %v, want rejected", err)
		}
	})
	t.Run("list", func(t *testing.T) {
		refunds, more, err := e.client.Refunds(t.Context(), c.ID)
		if err != nil || more || len(refunds) != 2 {
			t.Fatalf("Refunds = %+v, %v, %v; want 2", refunds, more, err)
		}
		var sum int64
		for _, r := range refunds {
			sum += r.Amount
		}
		if sum != 1999 || refunds[0] != first && refunds[1] != first {
			t.Errorf("Refunds = %+v, want the first refund and 1999 in all", refunds)
		}
		if _, _, err := e.client.Refunds(t.Context(), "prch_unknown"); err == nil {
			t.Errorf("Refunds of an unknown charge = nil error, want one")
		}
	})
	t.Run("unknown or failed charge", func(t *testing.T) {
		if _, err := e.client.Refund(t.Context(), "refund-4", provider.RefundRequest{Charge: "prch_unknown", Amount: 1}); classify(err) != "rejected" {
			t.Errorf("Refund of an unknown charge = %v, want rejected", err)
		}
		_, err := e.client.Charge(t.Context(), "charge-declined", request(simulator.TokenDeclined))
		var declined *provider.DeclinedError
		if !errors.As(err, &declined) {
			t.Fatalf("Charge = %v, want declined", err)
		}
		if _, err := e.client.Refund(t.Context(), "refund-5", provider.RefundRequest{Charge: declined.Charge.ID, Amount: 1}); classify(err) != "rejected" {
			t.Errorf("Refund of a failed charge = %v, want rejected", err)
		}
	})
}

// TestRefundByChargeSource: the source of the refunded charge decides what
// its refunds do.
func TestRefundByChargeSource(t *testing.T) {
	e := newEnv(t, 500*time.Millisecond)
	t.Run(simulator.TokenRefundUnavailable, func(t *testing.T) {
		c := e.charged(t, "charge-unavailable", simulator.TokenRefundUnavailable)
		_, err := e.client.Refund(t.Context(), "refund-unavailable", provider.RefundRequest{Charge: c.ID, Amount: 1})
		if !errors.Is(err, provider.ErrNotRefunded) {
			t.Errorf("Refund = %v, want ErrNotRefunded", err)
		}
		if _, err := e.client.LookupRefund(t.Context(), "refund-unavailable"); !errors.Is(err, provider.ErrNoRefund) {
			t.Errorf("LookupRefund = %v, want ErrNoRefund", err)
		}
	})
	t.Run(simulator.TokenRefundTimeout, func(t *testing.T) {
		c := e.charged(t, "charge-timeout", simulator.TokenRefundTimeout)
		_, err := e.client.Refund(t.Context(), "refund-timeout", provider.RefundRequest{Charge: c.ID, Amount: 1999})
		if !errors.Is(err, provider.ErrOutcomeUnknown) {
			t.Errorf("Refund = %v, want ErrOutcomeUnknown", err)
		}
		r, err := e.client.LookupRefund(t.Context(), "refund-timeout")
		if err != nil || r.Amount != 1999 || r.Charge != c.ID {
			t.Errorf("LookupRefund = %+v, %v; want the refund of 1999", r, err)
		}
	})
	t.Run(simulator.TokenRefundSlow, func(t *testing.T) {
		c := e.charged(t, "charge-slow", simulator.TokenRefundSlow)
		start := time.Now()
		if _, err := e.client.Refund(t.Context(), "refund-slow", provider.RefundRequest{Charge: c.ID, Amount: 1}); err != nil {
			t.Errorf("Refund = %v, want it made", err)
		}
		if took := time.Since(start); took < 100*time.Millisecond {
			t.Errorf("slow refund took %v, want the simulator's delay (100ms)", took)
		}
	})
	t.Run("not sent", func(t *testing.T) {
		c := provider.New(closedURL(t), &http.Client{Timeout: time.Second})
		if _, err := c.Refund(t.Context(), "k", provider.RefundRequest{Charge: "prch_1", Amount: 1}); !errors.Is(err, provider.ErrNotRefunded) {
			t.Errorf("Refund = %v, want ErrNotRefunded", err)
		}
		if _, err := c.LookupRefund(t.Context(), "k"); err == nil || errors.Is(err, provider.ErrNoRefund) {
			t.Errorf("LookupRefund = %v, want a plain error", err)
		}
	})
	t.Run("reset after sending", func(t *testing.T) {
		c := provider.New(resetServer(t), &http.Client{Timeout: 2 * time.Second})
		if _, err := c.Refund(t.Context(), "k", provider.RefundRequest{Charge: "prch_1", Amount: 1}); classify(err) != "unknown" {
			t.Errorf("Refund = %v, want ErrOutcomeUnknown", err)
		}
	})
}

// TestRefundsConcurrent races refunds of one charge under different keys
// and the same key: they never add up to more than the charge, and each key
// refunds once.
func TestRefundsConcurrent(t *testing.T) {
	e := newEnv(t, 5*time.Second)
	c := e.charged(t, "charge-raced", simulator.TokenVisa) // 1999
	const keys, dups = 8, 3
	var mu sync.Mutex
	made := map[string]provider.Refund{}
	busy := map[string]bool{}
	refund := func(key string) {
		r, err := e.client.Refund(t.Context(), key, provider.RefundRequest{Charge: c.ID, Amount: 300})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			if prev, ok := made[key]; ok && prev != r {
				t.Errorf("key %s refunded twice: %+v and %+v", key, prev, r)
			}
			made[key] = r
		case classify(err) == "rejected": // more than is left
		case classify(err) == "unknown": // the simulator's bounded retries ran out
			busy[key] = true
		default:
			t.Errorf("Refund(%s) = %v", key, err)
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for k := range keys {
		for range dups {
			wg.Go(func() {
				<-start
				refund(fmt.Sprintf("race-%d", k))
			})
		}
	}
	close(start)
	wg.Wait()
	for key := range busy { // a client retries an unknown outcome
		refund(key)
	}
	refunds, _, err := e.client.Refunds(t.Context(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, r := range refunds {
		sum += r.Amount
	}
	if len(refunds) != len(made) || sum > 1999 || len(made) != 6 {
		t.Errorf("%d refunds listed of %d in all, %d keys answered; want 6 refunds of 300 (1999 / 300)", len(refunds), sum, len(made))
	}
}

// TestRefundClassification runs Refund and LookupRefund against canned
// answers.
func TestRefundClassification(t *testing.T) {
	const ok = `{"id":"prre_1","object":"refund","status":"succeeded","amount":5,"currency":"usd","charge":"prch_1","created":1893553445,"idempotency_key":"k"}`
	tests := []struct {
		name           string
		status         int
		body           string
		refund, lookup string // as classify names them
	}{
		{"201 refund", 201, ok, "ok", "status"},
		{"200 refund", 200, ok, "ok", "ok"},
		{"200 pending refund", 200, `{"id":"prre_1","object":"refund","status":"pending","idempotency_key":"k"}`, "unknown", "plain"},
		{"200 another key's refund", 200, `{"id":"prre_1","object":"refund","status":"succeeded","idempotency_key":"other"}`, "unknown", "plain"},
		{"200 a charge", 200, `{"id":"prch_1","object":"charge","status":"succeeded"}`, "unknown", "plain"},
		{"201 garbage", 201, `<html>`, "unknown", "status"},
		{"400", 400, `{"error":{"code":"amount_too_large"}}`, "rejected", "rejected"},
		{"401", 401, ``, "status", "status"},
		{"404 resource_missing", 404, `{"error":{"code":"resource_missing"}}`, "status", "no-refund"},
		{"404 from elsewhere", 404, `404 page not found`, "status", "status"},
		{"422 key reused", 422, `{"error":{"code":"idempotency_key_reused"}}`, "status", "status"},
		{"429", 429, ``, "not-refunded", "status"},
		{"500", 500, ``, "unknown", "status"},
		{"503", 503, ``, "not-refunded", "status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			c := provider.New(srv.URL, nil)
			_, err := c.Refund(t.Context(), "k", provider.RefundRequest{Charge: "prch_1", Amount: 5})
			if got := classify(err); got != tt.refund {
				t.Errorf("Refund = %v (%s), want %s", err, got, tt.refund)
			}
			_, err = c.LookupRefund(t.Context(), "k")
			if got := classify(err); got != tt.lookup {
				t.Errorf("LookupRefund = %v (%s), want %s", err, got, tt.lookup)
			}
		})
	}
}
