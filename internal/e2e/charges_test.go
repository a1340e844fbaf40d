package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncehq/once/internal/charges"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/payments"
)

// chargeTimeout is the provider timeout of the charge tests: well longer than the
// simulator's tok_slow delay (300ms), so that a slow charge still answers on a
// loaded machine, and far shorter than its tok_timeout hold (10s).
const chargeTimeout = 1500 * time.Millisecond

// chargeBody is a create-charge body with the given source.
func chargeBody(source string) string {
	return fmt.Sprintf(`{"amount": 2500, "currency": "EUR", "customer": "cus_42", "description": "Order 1001", "metadata": {"order": "1001"}, "source": %q}`, source)
}

func newChargeStack(t *testing.T) *stack {
	t.Helper()
	return newStack(t, withConfig(func(c *config.Config) {
		c.ProviderTimeout = chargeTimeout
		c.FaultInjection = true
	}))
}

// charge sends POST /v1/charges for acme under key.
func (s *stack) charge(t testing.TB, key, body string, header map[string][]string) response {
	t.Helper()
	return s.do(t, request{path: "/v1/charges", tenant: "acme", keys: []string{key}, body: body, header: header})
}

// record reads acme's idempotency record for the raw key.
func (s *stack) record(t testing.TB, key string) (idempotency.Record, error) {
	t.Helper()
	return dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"]).Get(t.Context(), idempotency.NewKey("acme", key))
}

// charged is the number of charges the simulator made for acme's raw key and
// the charge request body.
func (s *stack) charged(t testing.TB, key, body string) int {
	t.Helper()
	n, err := s.sim.Count(t.Context(), forwardKey(t, key, body))
	if err != nil {
		t.Fatalf("simulator Count: %v", err)
	}
	return n
}

// forwardKey is the key the api sends the provider for acme's raw key and
// the charge request body.
func forwardKey(t testing.TB, key, body string) string {
	t.Helper()
	canonical, err := idempotency.Canonical([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.NewKey("acme", key).Forward(idempotency.Fingerprint(http.MethodPost, charges.Route, canonical))
}

// rebuilt is the response the reconciler would store for acme's raw key:
// ChargeResponse of the stored record and of the provider's charge.
func (s *stack) rebuilt(t testing.TB, key string) (idempotency.Record, idempotency.Response) {
	t.Helper()
	rec, err := s.record(t, key)
	if err != nil {
		t.Fatalf("record: %v", err)
	}
	c, err := s.provider.Lookup(t.Context(), rec.ForwardKey())
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	resp, err := charges.Response(rec, c)
	if err != nil {
		t.Fatalf("ChargeResponse: %v", err)
	}
	return rec, resp
}

// asStored is r as the engine stores it.
func asStored(r response) idempotency.Response {
	return idempotency.Response{Status: r.status, Header: map[string]string{"Content-Type": r.header.Get("Content-Type")}, Body: r.body}
}

// wantProblem checks r's status, problem code and Retry-After ("" for none).
func wantProblem(t testing.TB, r response, status int, code, retryAfter string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("POST = %d %s, want %d %s", r.status, r.body, status, code)
	}
	if got := problem(t, r)["code"]; got != code {
		t.Errorf("problem code = %v, want %s", got, code)
	}
	if got := r.header.Get("Retry-After"); got != retryAfter {
		t.Errorf("Retry-After = %q, want %q", got, retryAfter)
	}
}

func wantStatus(t testing.TB, key string, rec idempotency.Record, err error, want idempotency.Status) {
	t.Helper()
	if err != nil || rec.Status != want {
		t.Errorf("record %s = %s, %v; want %s", key, rec.Status, err, want)
	}
}

// TestChargesContract walks POST /v1/charges through every answer of the
// provider simulator, over real HTTP, against DynamoDB Local.
func TestChargesContract(t *testing.T) {
	s := newChargeStack(t)
	// The engine's clock an hour ahead of the real one: created must come
	// from the record, not from the time the answer is built.
	s.clock.Advance(time.Hour)

	t.Run("succeeded", func(t *testing.T) {
		const key = "charge-visa"
		first := s.charge(t, key, chargeBody("tok_visa"), nil)
		if first.status != http.StatusCreated {
			t.Fatalf("POST = %d %s, want 201", first.status, first.body)
		}
		c, err := s.provider.Lookup(t.Context(), forwardKey(t, key, chargeBody("tok_visa")))
		if err != nil {
			t.Fatalf("Lookup: %v", err)
		}
		want := map[string]any{
			"id": charges.ID(idempotency.NewKey("acme", key), c.ID), "object": "charge", "amount": 2500.0, "currency": "eur",
			"customer": "cus_42", "description": "Order 1001", "metadata": map[string]any{"order": "1001"},
			"status": "succeeded", "provider_charge_id": c.ID, "created": float64(s.clock.Now().Unix()),
		}
		if diff := cmp.Diff(want, decode(t, first)); diff != "" {
			t.Errorf("body (-want +got):\n%s", diff)
		}
		if got := first.header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", got)
		}
		for _, h := range []string{"Location", "Idempotent-Replayed", "Retry-After"} {
			if got := first.header.Values(h); len(got) != 0 {
				t.Errorf("%s = %q, want absent", h, got)
			}
		}

		wantReplay(t, s.charge(t, key, chargeBody("tok_visa"), nil), first)
		if n := s.charged(t, key, chargeBody("tok_visa")); n != 1 {
			t.Errorf("simulator charges for the key = %d, want 1", n)
		}

		// What a reconciler rebuilds from the record and the provider is
		// what the client got and what the record stores.
		rec, resp := s.rebuilt(t, key)
		wantStatus(t, key, rec, nil, idempotency.StatusCompleted)
		if diff := cmp.Diff(asStored(first), resp); diff != "" {
			t.Errorf("ChargeResponse(stored record, Lookup) vs live response (-live +rebuilt):\n%s", diff)
		}
		if diff := cmp.Diff(*rec.Response, resp); diff != "" {
			t.Errorf("ChargeResponse(stored record, Lookup) vs stored response (-stored +rebuilt):\n%s", diff)
		}
	})

	t.Run("declined", func(t *testing.T) {
		const key = "charge-declined"
		first := s.charge(t, key, chargeBody("tok_chargeDeclined"), nil)
		wantProblem(t, first, http.StatusPaymentRequired, "card_declined", "")
		wantReplay(t, s.charge(t, key, chargeBody("tok_chargeDeclined"), nil), first)
		if n := s.charged(t, key, chargeBody("tok_chargeDeclined")); n != 1 {
			t.Errorf("simulator charges for the key = %d, want 1 (the failed charge)", n)
		}
		rec, resp := s.rebuilt(t, key)
		wantStatus(t, key, rec, nil, idempotency.StatusCompleted)
		if diff := cmp.Diff(asStored(first), resp); diff != "" {
			t.Errorf("ChargeResponse(stored record, Lookup) vs live response (-live +rebuilt):\n%s", diff)
		}
	})

	t.Run("rejected by the provider", func(t *testing.T) {
		// The API accepts any well-formed token; the simulator knows five.
		const key = "charge-rejected"
		first := s.charge(t, key, chargeBody("tok_mastercard"), nil)
		wantProblem(t, first, http.StatusUnprocessableEntity, "provider_rejected", "")
		p := problem(t, first)
		want := charges.ErrProviderRejected.Problem()
		if p["title"] != want.Title || p["detail"] != want.Detail {
			t.Errorf("problem = %s, want title %q and detail %q", first.body, want.Title, want.Detail)
		}
		if strings.Contains(string(first.body), "tok_mastercard") {
			t.Errorf("problem %s echoes the provider's message", first.body)
		}
		wantReplay(t, s.charge(t, key, chargeBody("tok_mastercard"), nil), first)
		if n := s.charged(t, key, chargeBody("tok_mastercard")); n != 0 {
			t.Errorf("simulator charges for the key = %d, want 0", n)
		}
		rec, err := s.record(t, key)
		wantStatus(t, key, rec, err, idempotency.StatusCompleted)
		if err == nil && (rec.Response == nil || cmp.Diff(asStored(first), *rec.Response) != "") {
			t.Errorf("stored response = %+v, want the 422 sent", rec.Response)
		}
	})

	t.Run("provider unavailable is not stored", func(t *testing.T) {
		const key = "charge-unavailable"
		for i := range 2 {
			r := s.charge(t, key, chargeBody("tok_unavailable"), nil)
			wantProblem(t, r, http.StatusServiceUnavailable, "provider_unavailable", "1")
			if r.header.Get("Idempotent-Replayed") != "" {
				t.Errorf("attempt %d replayed, want it executed", i+1)
			}
			if _, err := s.record(t, key); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record after attempt %d: %v, want none (released)", i+1, err)
			}
		}
		if n := s.charged(t, key, chargeBody("tok_unavailable")); n != 0 {
			t.Errorf("simulator charges for the key = %d, want 0", n)
		}
	})

	t.Run("outcome unknown", func(t *testing.T) {
		const key = "charge-timeout"
		start := time.Now()
		r := s.charge(t, key, chargeBody("tok_timeout"), nil)
		wantProblem(t, r, http.StatusGatewayTimeout, "provider_outcome_unknown", "2")
		if took := time.Since(start); took > chargeTimeout+2*time.Second {
			t.Errorf("504 took %v, want about the provider timeout %v", took, chargeTimeout)
		}
		rec, err := s.record(t, key)
		wantStatus(t, key, rec, err, idempotency.StatusUnknown)
		if len(rec.Request) == 0 {
			t.Errorf("UNKNOWN record has no request to reconcile from")
		}
		wantProblem(t, s.charge(t, key, chargeBody("tok_timeout"), nil), http.StatusConflict, "idempotency_request_in_progress", "2")
		if n := s.charged(t, key, chargeBody("tok_timeout")); n != 1 {
			t.Errorf("simulator charges for the key = %d, want 1 (charged, answer lost)", n)
		}

		// Reconcile by hand, as the reconciler does: the retry then gets
		// the answer the first request would have had.
		rec, resp := s.rebuilt(t, key)
		done := rec
		done.Status, done.Response, done.ExpiresAt, done.UpdatedAt = idempotency.StatusCompleted, &resp, s.clock.Now().Add(time.Hour), s.clock.Now()
		if err := dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"]).Complete(t.Context(), done, rec.LeaseToken, nil); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		again := s.charge(t, key, chargeBody("tok_timeout"), nil)
		if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after reconciliation = %d %s, want the 201 replayed", again.status, again.body)
		}
		got := decode(t, again)
		prch, _ := got["provider_charge_id"].(string)
		if got["id"] != charges.ID(rec.Key, prch) || got["created"] != float64(rec.CreatedAt.Unix()) || got["status"] != "succeeded" {
			t.Errorf("reconciled charge = %s, want id %s created %d", again.body, charges.ID(rec.Key, prch), rec.CreatedAt.Unix())
		}
		if n := s.charged(t, key, chargeBody("tok_timeout")); n != 1 {
			t.Errorf("simulator charges for the key = %d, want 1", n)
		}
	})

	t.Run("different body", func(t *testing.T) {
		r := s.charge(t, "charge-visa", strings.Replace(chargeBody("tok_visa"), "2500", "2501", 1), nil)
		wantProblem(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused", "")
		if n := s.charged(t, "charge-visa", chargeBody("tok_visa")); n != 1 {
			t.Errorf("simulator charges for the key = %d, want 1", n)
		}
	})

	t.Run("invalid requests reserve nothing", func(t *testing.T) {
		tests := []struct {
			name, body string
			field      any
		}{
			{"source missing", `{"amount": 2500, "currency": "EUR", "customer": "cus_42"}`, "source"},
			{"source null", `{"amount": 2500, "currency": "EUR", "customer": "cus_42", "source": null}`, "source"},
			{"source empty", chargeBody(""), "source"},
			{"amount", strings.Replace(chargeBody("tok_visa"), "2500", "0", 1), "amount"},
			{"currency", strings.Replace(chargeBody("tok_visa"), "EUR", "EURO", 1), "currency"},
			{"unknown field", `{"amount": 1, "currency": "EUR", "customer": "c", "source": "tok_visa", "capture": false}`, "capture"},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				key := fmt.Sprintf("charge-invalid-%d", i)
				r := s.charge(t, key, tt.body, nil)
				wantProblem(t, r, http.StatusBadRequest, "invalid_request", "")
				if got := problem(t, r)["field"]; got != tt.field {
					t.Errorf("field = %v, want %v", got, tt.field)
				}
				if _, err := s.record(t, key); !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("record after 400: %v, want none", err)
				}
				if n := s.charged(t, key, tt.body); n != 0 {
					t.Errorf("simulator charges for the key = %d, want 0", n)
				}
			})
		}
	})

	t.Run("concurrent duplicates charge once", func(t *testing.T) {
		const key, dups = "charge-slow", 8
		answers := make([]response, dups)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range dups {
			wg.Go(func() {
				<-start
				answers[i] = s.charge(t, key, chargeBody("tok_slow"), nil)
			})
		}
		close(start)
		wg.Wait()
		var fresh []response
		for _, r := range answers {
			switch {
			case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "":
				fresh = append(fresh, r)
			case r.status == http.StatusCreated: // arrived after the original completed
			case r.status == http.StatusConflict:
				// The clock stands still: the whole lease is left.
				wantProblem(t, r, http.StatusConflict, "idempotency_request_in_progress", "30")
			default:
				t.Errorf("duplicate = %d %s, want 201 or 409", r.status, r.body)
			}
		}
		if len(fresh) != 1 {
			t.Fatalf("%d requests executed, want 1", len(fresh))
		}
		for _, r := range answers {
			if r.status == http.StatusCreated && string(r.body) != string(fresh[0].body) {
				t.Errorf("201 bodies differ: %s and %s", r.body, fresh[0].body)
			}
		}
		if n := s.charged(t, key, chargeBody("tok_slow")); n != 1 {
			t.Errorf("simulator charges for the key = %d, want 1", n)
		}
	})

	t.Run("retry-after follows the lease", func(t *testing.T) {
		const key = "charge-slow-lease"
		done := make(chan response, 1)
		go func() { done <- s.charge(t, key, chargeBody("tok_slow"), nil) }()
		// The simulator records the charge before its delay: once it is
		// counted the original holds the lease for 300ms more.
		deadline := time.Now().Add(5 * time.Second)
		for s.charged(t, key, chargeBody("tok_slow")) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the original request never reached the simulator")
			}
			time.Sleep(5 * time.Millisecond)
		}
		s.clock.Advance(10 * time.Second)
		dup := s.charge(t, key, chargeBody("tok_slow"), nil)
		wantProblem(t, dup, http.StatusConflict, "idempotency_request_in_progress", "20")
		if first := <-done; first.status != http.StatusCreated {
			t.Errorf("original = %d %s, want 201", first.status, first.body)
		}
		if n := s.charged(t, key, chargeBody("tok_slow")); n != 1 {
			t.Errorf("simulator charges for the key = %d, want 1", n)
		}
	})

	t.Run("log lines", func(t *testing.T) {
		var unknown, rejected, provider int
		for _, l := range s.logs.Lines(t) {
			if l["route"] != charges.Route {
				t.Errorf("log line %v, want route %s", l, charges.Route)
				continue
			}
			if l["outcome"] == idempotency.OutcomeUnknown {
				unknown++
				if l["status"] != 504.0 || l["level"] != "ERROR" || !strings.Contains(fmt.Sprint(l["error"]), "outcome unknown") {
					t.Errorf("unknown-outcome log line = %v, want an ERROR 504 with the provider error", l)
				}
			}
			if l["status"] == 422.0 && l["outcome"] == idempotency.OutcomeCreated {
				rejected++
				if l["level"] != "INFO" || l["error"] != "provider_rejected: provider: charge: status 400: invalid_request" {
					t.Errorf("provider_rejected log line = %v, want an INFO 422 with the provider's status and code", l)
				}
			}
			if l["provider_calls"] != nil {
				provider++
			}
		}
		if unknown != 1 || rejected != 1 || provider == 0 {
			t.Errorf("%d unknown-outcome lines, %d rejected and %d with provider calls, want 1, 1 and some", unknown, rejected, provider)
		}
		logs := s.logs.String()
		for _, secret := range []string{"charge-visa", "charge-timeout", "cus_42", "Order 1001", "sk_test_", "tok_mastercard"} {
			if strings.Contains(logs, secret) {
				t.Errorf("the logs contain %q", secret)
			}
		}
	})
}

// TestChargeIDs checks that every charge the provider makes has its own ID:
// a key reused with another body once its retention has passed makes a new
// charge, answered with a new ID, while the same body under the same key
// names the same operation at the provider, whose one charge keeps its ID.
func TestChargeIDs(t *testing.T) {
	s := newChargeStack(t)
	const key = "charge-reused"
	first := s.charge(t, key, chargeBody("tok_visa"), nil)
	if first.status != http.StatusCreated {
		t.Fatalf("POST = %d %s, want 201", first.status, first.body)
	}
	s.clock.Advance(s.cfg.Retention + time.Minute)

	other := strings.Replace(chargeBody("tok_visa"), "2500", "2600", 1)
	second := s.charge(t, key, other, nil)
	if second.status != http.StatusCreated || second.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("POST, key reused after its retention with another body = %d %s, want a new 201", second.status, second.body)
	}
	a, b := decode(t, first), decode(t, second)
	if a["provider_charge_id"] == b["provider_charge_id"] || a["id"] == b["id"] {
		t.Errorf("two charges answered with ids %v and %v (provider %v and %v), want distinct", a["id"], b["id"], a["provider_charge_id"], b["provider_charge_id"])
	}

	s.clock.Advance(s.cfg.Retention + time.Minute)
	third := s.charge(t, key, chargeBody("tok_visa"), nil)
	c := decode(t, third)
	if third.status != http.StatusCreated || c["provider_charge_id"] != a["provider_charge_id"] || c["id"] != a["id"] {
		t.Errorf("the first body again = %d %s, want the provider's first charge, %v, under its id %v", third.status, third.body, a["provider_charge_id"], a["id"])
	}
	if n := s.charged(t, key, chargeBody("tok_visa")); n != 1 {
		t.Errorf("simulator charges for the first body = %d, want 1", n)
	}
}

// TestChargesMaximalBody sends the largest charge the API accepts, every
// string at its limit in characters of several byte lengths: the provider
// takes it, counting characters as the API does and reading the longest
// escaped form ("<" is sent as \u003c).
func TestChargesMaximalBody(t *testing.T) {
	s := newChargeStack(t)
	for i, char := range []string{"é", "€", "😀", "<"} {
		t.Run(char, func(t *testing.T) {
			key := fmt.Sprintf("charge-maximal-%d", i)
			body := maximalBody(t, char)
			r := s.charge(t, key, body, nil)
			if r.status != http.StatusCreated {
				t.Fatalf("POST (%d bytes) = %d %s, want 201", len(body), r.status, r.body)
			}
			sent := decode(t, response{body: []byte(body)})
			got := decode(t, r)
			for _, field := range []string{"amount", "customer", "description", "metadata"} {
				if diff := cmp.Diff(sent[field], got[field]); diff != "" {
					t.Errorf("charge %s (-sent +got):\n%s", field, diff)
				}
			}
			if n := s.charged(t, key, body); n != 1 {
				t.Errorf("simulator charges for the key = %d, want 1", n)
			}
		})
	}
}

// maximalBody is the largest create-charge body the API accepts, its
// strings made of char, each at its limit in characters.
func maximalBody(t testing.TB, char string) string {
	t.Helper()
	metadata := make(map[string]string, payments.MaxMetadataKeys)
	for i := range payments.MaxMetadataKeys {
		k := fmt.Sprintf("%02d", i) + strings.Repeat(char, payments.MaxMetadataKeyLength-2)
		metadata[k] = strings.Repeat(char, payments.MaxMetadataValue)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(map[string]any{
		"amount": payments.MaxAmount, "currency": "EUR", "source": "tok_visa",
		"customer":    strings.Repeat(char, payments.MaxCustomerLength),
		"description": strings.Repeat(char, payments.MaxDescriptionLength),
		"metadata":    metadata,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := payments.DecodeWithSource([]byte(b.String())); err != nil {
		t.Fatalf("maximal body of %q: %v, want a valid request", char, err)
	}
	return b.String()
}

// TestChargesFaultInjection crashes the function at each fault point of a
// charge: a function error (errorType Crash), the record left as the point implies, at most
// one charge, and a retry that never charges again.
func TestChargesFaultInjection(t *testing.T) {
	s := newChargeStack(t)
	tests := []struct {
		point       string
		wantStatus  idempotency.Status
		wantCharges int
	}{
		{"after-reserve", idempotency.StatusInProgress, 0},
		{"after-provider-call", idempotency.StatusInProgress, 1},
		{"after-complete", idempotency.StatusCompleted, 1},
	}
	for _, tt := range tests {
		t.Run(tt.point, func(t *testing.T) {
			key := "charge-crash-" + tt.point
			r := s.charge(t, key, chargeBody("tok_visa"), map[string][]string{"Once-Fault": {tt.point}})
			wantCrash(t, r, tt.point)
			rec, err := s.record(t, key)
			wantStatus(t, key, rec, err, tt.wantStatus)
			if n := s.charged(t, key, chargeBody("tok_visa")); n != tt.wantCharges {
				t.Errorf("simulator charges for the key = %d, want %d", n, tt.wantCharges)
			}
			retry := s.charge(t, key, chargeBody("tok_visa"), nil)
			if tt.wantStatus == idempotency.StatusCompleted {
				if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("retry = %d %s, want the stored 201 replayed", retry.status, retry.body)
				}
				return
			}
			if rec.LeaseToken == "" || !rec.ExpiresAt.Equal(s.clock.Now().Add(s.cfg.Lease).Truncate(time.Millisecond)) {
				t.Errorf("record lease %q until %v, want a lease until %v", rec.LeaseToken, rec.ExpiresAt, s.clock.Now().Add(s.cfg.Lease))
			}
			wantProblem(t, retry, http.StatusConflict, "idempotency_request_in_progress", "30")
		})
	}

	// Once the lease has run out, an abandoned reservation goes to UNKNOWN
	// for the reconciler: it is never executed again.
	s.clock.Advance(s.cfg.Lease + time.Second)
	for _, tt := range tests[:2] {
		key := "charge-crash-" + tt.point
		r := s.charge(t, key, chargeBody("tok_visa"), nil)
		wantProblem(t, r, http.StatusConflict, "idempotency_request_in_progress", "2")
		rec, err := s.record(t, key)
		wantStatus(t, key, rec, err, idempotency.StatusUnknown)
		if n := s.charged(t, key, chargeBody("tok_visa")); n != tt.wantCharges {
			t.Errorf("%s: simulator charges for the key = %d, want %d", tt.point, n, tt.wantCharges)
		}
	}

	var crashes int
	for _, l := range s.logs.Lines(t) {
		if l["crash"] != nil {
			crashes++
			if l["status"] != 500.0 || l["route"] != charges.Route {
				t.Errorf("crash log line = %v, want status 500 on %s", l, charges.Route)
			}
		}
	}
	if crashes != len(tests) {
		t.Errorf("%d crash log lines, want %d", crashes, len(tests))
	}
}
