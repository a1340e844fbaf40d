package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/reconciler"
	"github.com/oncehq/once/internal/refunds"
	"github.com/oncehq/once/internal/worker"
)

// paid is a payment the tests refund: its ID and its charge at the
// provider.
type paid struct {
	tenant, id, charge string
	amount             int64
}

// newRefundStack is a stack for refunds: crash injection on, a provider
// timeout above the simulator's slow delay (300ms).
func newRefundStack(t *testing.T, opts ...stackOption) *stack {
	t.Helper()
	return newStack(t, append([]stackOption{withConfig(func(c *config.Config) {
		c.ProviderTimeout = chargeTimeout
		c.FaultInjection = true
	})}, opts...)...)
}

// payment creates tenant's payment of amount through the API and settles it
// as the worker does: charged at the provider with source under the
// worker's key, then succeeded. With charge set, the payment is settled
// with that charge ID instead, and the provider is not called.
func (s *stack) payment(t testing.TB, tenant string, amount int64, source, charge string) paid {
	t.Helper()
	body := fmt.Sprintf(`{"amount": %d, "currency": "EUR", "customer": "cus_42", "source": %q}`, amount, source)
	r := s.do(t, request{tenant: tenant, keys: []string{fmt.Sprintf("payment-%d", time.Now().UnixNano())}, body: body})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/payments = %d %s", r.status, r.body)
	}
	p := paid{tenant: tenant, id: decode(t, r)["id"].(string), amount: amount, charge: charge}
	if p.charge == "" {
		c, err := s.provider.Charge(t.Context(), worker.ChargeKey(tenant, p.id), provider.ChargeRequest{
			Amount: amount, Currency: "eur", Source: source, Customer: "cus_42",
		})
		if err != nil {
			t.Fatalf("charge the payment: %v", err)
		}
		p.charge = c.ID
	}
	if err := payments.NewTable(s.client, s.names.ByLogicalID["PaymentsTable"]).Settle(t.Context(), tenant, p.id, payments.StatusSucceeded, p.charge, ""); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	s.calls.take()
	return p
}

// refund sends POST /v1/refunds for tenant under key.
func (s *stack) refund(t testing.TB, tenant, key, body string, header map[string][]string) response {
	t.Helper()
	return s.do(t, request{path: "/v1/refunds", tenant: tenant, keys: []string{key}, body: body, header: header})
}

// refundBody is a create-refund body for p: amount and reason are left out
// when zero and empty.
func refundBody(p paid, amount int64, reason string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"payment": %q`, p.id)
	if amount > 0 {
		fmt.Fprintf(&b, `, "amount": %d`, amount)
	}
	if reason != "" {
		fmt.Fprintf(&b, `, "reason": %q`, reason)
	}
	b.WriteString("}")
	return b.String()
}

// stored reads p as the payments table holds it.
func (s *stack) stored(t testing.TB, p paid) payments.Payment {
	t.Helper()
	got, err := payments.NewTable(s.client, s.names.ByLogicalID["PaymentsTable"]).Get(t.Context(), p.tenant, p.id)
	if err != nil {
		t.Fatalf("Get(%s): %v", p.id, err)
	}
	return got
}

// wantSettled checks that p has refunded what the provider refunded of its
// charge, refunded in all, and that nothing is held.
func (s *stack) wantSettled(t testing.TB, p paid, refunded int64) {
	t.Helper()
	got := s.stored(t, p)
	if got.AmountRefunded != refunded || got.Refundable != p.amount-refunded || len(got.Holds) != 0 {
		t.Errorf("payment %s: refunded %d, refundable %d, holds %v; want %d, %d, none",
			p.id, got.AmountRefunded, got.Refundable, got.Holds, refunded, p.amount-refunded)
	}
	rs, _, err := s.provider.Refunds(t.Context(), p.charge)
	if err != nil {
		t.Fatalf("provider Refunds: %v", err)
	}
	var atProvider int64
	for _, r := range rs {
		atProvider += r.Amount
	}
	items := s.refundItems(t, p)
	var inTable int64
	for _, it := range items {
		inTable += it.Amount
	}
	if atProvider != refunded || inTable != refunded || len(items) != len(rs) {
		t.Errorf("payment %s: the provider refunded %d in %d refunds, the refunds table holds %d in %d; want %d in the same number",
			p.id, atProvider, len(rs), inTable, len(items), refunded)
	}
}

// refundItems returns the refunds table's items of p.
func (s *stack) refundItems(t testing.TB, p paid) []refunds.Refund {
	t.Helper()
	var out []refunds.Refund
	pages := dynamodb.NewScanPaginator(s.client, &dynamodb.ScanInput{TableName: aws.String(s.names.ByLogicalID["RefundsTable"]), ConsistentRead: aws.Bool(true)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var rs []refunds.Refund
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &rs); err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Payment == p.id && r.Tenant == p.tenant {
				out = append(out, r)
			}
		}
	}
	return out
}

// refundRecord reads tenant's idempotency record for the raw key.
func (s *stack) refundRecord(t testing.TB, tenant, key string) (idempotency.Record, error) {
	t.Helper()
	return dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"]).Get(t.Context(), idempotency.NewKey(tenant, key))
}

// reconcile runs the reconciler function's Reconciler, with its
// resolvers, on tenant's record for key, as the stream would.
func (s *stack) reconcile(t testing.TB, tenant, key string) {
	t.Helper()
	rec, err := s.refundRecord(t, tenant, key)
	if err != nil || rec.Status != idempotency.StatusUnknown {
		t.Fatalf("record to reconcile = %s, %v; want UNKNOWN", rec.Status, err)
	}
	resolvers, err := reconciler.Resolvers(s.cfg, s.client, app.Options{Metrics: s.metrics})
	if err != nil {
		t.Fatal(err)
	}
	r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
		Store: dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"]), Resolvers: resolvers,
		Settle: s.cfg.ProviderTimeout, Retention: s.cfg.Retention, Now: s.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(t.Context(), nil, rec); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
}

// refundForwardKey is the key the api sends the provider for tenant's raw
// key and the refund body.
func refundForwardKey(t testing.TB, tenant, key, body string) string {
	t.Helper()
	fp, err := idempotency.RequestFingerprint(http.MethodPost, refunds.RouteCreate, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.NewKey(tenant, key).Forward(fp)
}

// TestRefundsContract walks POST /v1/refunds and GET /v1/refunds/{id}
// through every outcome, counting the DynamoDB calls of each.
func TestRefundsContract(t *testing.T) {
	s := newRefundStack(t)
	// The engine's clock an hour ahead of the real one: created must come
	// from the record, not from the time the answer is built.
	s.clock.Advance(time.Hour)
	wantCalls := func(t *testing.T, what string, want map[string]int) {
		t.Helper()
		got, _ := s.calls.take()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("DynamoDB calls for %s (-want +got):\n%s", what, diff)
		}
	}
	p := s.payment(t, "acme", 2500, "tok_visa", "")

	var first response
	body := `{"payment": "` + p.id + `", "amount": 700, "reason": "requested_by_customer", "metadata": {"ticket": "T-1"}}`
	t.Run("refunded", func(t *testing.T) {
		first = s.refund(t, "acme", "refund-1", body, nil)
		if first.status != http.StatusCreated {
			t.Fatalf("POST = %d %s, want 201", first.status, first.body)
		}
		// Reserve with the hold, read the payment, complete with the effects.
		wantCalls(t, "a first refund", map[string]int{"TransactWriteItems": 2, "GetItem": 1})
		r, err := s.provider.LookupRefund(t.Context(), refundForwardKey(t, "acme", "refund-1", body))
		if err != nil {
			t.Fatalf("LookupRefund: %v", err)
		}
		id := refunds.ID(idempotency.NewKey("acme", "refund-1"))
		want := map[string]any{
			"id": id, "object": "refund", "payment": p.id, "amount": 700.0, "currency": "eur",
			"reason": "requested_by_customer", "metadata": map[string]any{"ticket": "T-1"}, "status": "succeeded",
			"provider_refund_id": r.ID, "created": float64(s.clock.Now().Unix()),
		}
		if diff := cmp.Diff(want, decode(t, first)); diff != "" {
			t.Errorf("body (-want +got):\n%s", diff)
		}
		if !strings.HasPrefix(string(first.body), `{"id":"`+id+`","object":"refund","payment":"`+p.id+`","amount":700,"currency":"eur","reason":`) {
			t.Errorf("body = %s, want the contract's field order", first.body)
		}
		if got := first.header.Get("Location"); got != "/v1/refunds/"+id {
			t.Errorf("Location = %q, want /v1/refunds/%s", got, id)
		}
		if got := first.header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", got)
		}
		s.wantSettled(t, p, 700)

		// The instance that stored the answer replays it from its cache;
		// another reads it with the reservation's transaction, which fails.
		for _, warm := range []bool{true, false} {
			if !warm {
				s.restart()
			}
			replay := s.refund(t, "acme", "refund-1", body, nil)
			wantReplay(t, replay, first)
			if replay.header.Get("Location") != first.header.Get("Location") {
				t.Errorf("replay Location = %q, want %q", replay.header.Get("Location"), first.header.Get("Location"))
			}
			want := map[string]int{"TransactWriteItems": 1}
			if warm {
				want = map[string]int{}
			}
			wantCalls(t, fmt.Sprintf("a replay (warm instance: %v)", warm), want)
		}

		// What the reconciler rebuilds from the record and the provider is
		// what the client got and what the record stores.
		rec, err := s.refundRecord(t, "acme", "refund-1")
		wantStatus(t, "refund-1", rec, err, idempotency.StatusCompleted)
		rebuilt, err := refunds.Response(rec, r)
		if err != nil {
			t.Fatalf("Response: %v", err)
		}
		live := asStored(first)
		live.Header["Location"] = first.header.Get("Location")
		if diff := cmp.Diff(live, rebuilt); diff != "" {
			t.Errorf("Response(stored record, LookupRefund) vs live response (-live +rebuilt):\n%s", diff)
		}
		if diff := cmp.Diff(*rec.Response, rebuilt); diff != "" {
			t.Errorf("Response(stored record, LookupRefund) vs stored response (-stored +rebuilt):\n%s", diff)
		}
	})

	t.Run("get", func(t *testing.T) {
		id := refunds.ID(idempotency.NewKey("acme", "refund-1"))
		r := s.do(t, request{method: "GET", path: "/v1/refunds/" + id, tenant: "acme"})
		if r.status != http.StatusOK || string(r.body) != string(first.body) || r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET = %d %v %s, want 200 no-store %s", r.status, r.header, r.body, first.body)
		}
		wantCalls(t, "a GET", map[string]int{"GetItem": 1})
		for _, rq := range []request{
			{method: "GET", path: "/v1/refunds/" + id, tenant: "globex"},
			{method: "GET", path: "/v1/refunds/re_0123456789abcdef01234567", tenant: "acme"},
			{method: "GET", path: "/v1/refunds/not-an-id", tenant: "acme"},
		} {
			if r := s.do(t, rq); r.status != http.StatusNotFound || problem(t, r)["code"] != "not_found" {
				t.Errorf("GET %s as %s = %d %s, want 404", rq.path, rq.tenant, r.status, r.body)
			}
		}
		s.calls.take()
		pr := s.do(t, request{method: "GET", path: "/v1/payments/" + p.id, tenant: "acme"})
		if got := decode(t, pr)["amount_refunded"]; pr.status != http.StatusOK || got != 700.0 {
			t.Errorf("GET the payment = %d %s, want amount_refunded 700", pr.status, pr.body)
		}
		s.calls.take()
	})

	t.Run("too much", func(t *testing.T) {
		tooMuch := refundBody(p, 1801, "")
		r := s.refund(t, "acme", "refund-too-much", tooMuch, nil)
		wantProblem(t, r, http.StatusBadRequest, "amount_exceeds_refundable", "")
		if d := problem(t, r)["detail"]; !strings.Contains(fmt.Sprint(d), "1800") {
			t.Errorf("detail = %v, want what is left (1800)", d)
		}
		// The hold's condition fails in the reservation's transaction; the
		// answer is then stored.
		wantCalls(t, "a refusal", map[string]int{"TransactWriteItems": 2})
		wantReplay(t, s.refund(t, "acme", "refund-too-much", tooMuch, nil), r)
		wantCalls(t, "a refusal's replay, warm", map[string]int{})
		s.restart()
		wantReplay(t, s.refund(t, "acme", "refund-too-much", tooMuch, nil), r)
		wantCalls(t, "a refusal's replay, cold", map[string]int{"TransactWriteItems": 1})
		if _, err := s.provider.LookupRefund(t.Context(), refundForwardKey(t, "acme", "refund-too-much", tooMuch)); !errors.Is(err, provider.ErrNoRefund) {
			t.Errorf("LookupRefund = %v, want none", err)
		}
		s.wantSettled(t, p, 700)
		s.calls.take()
	})

	t.Run("the rest, amount left out", func(t *testing.T) {
		rest := refundBody(p, 0, "duplicate")
		r := s.refund(t, "acme", "refund-rest", rest, nil)
		if r.status != http.StatusCreated || decode(t, r)["amount"] != 1800.0 || decode(t, r)["reason"] != "duplicate" {
			t.Fatalf("POST = %d %s, want 201 of 1800", r.status, r.body)
		}
		wantCalls(t, "a first refund", map[string]int{"TransactWriteItems": 2, "GetItem": 1})
		s.wantSettled(t, p, 2500)
		// Its retry replays; it does not re-decide against the state it
		// made (nothing left).
		s.restart()
		wantReplay(t, s.refund(t, "acme", "refund-rest", rest, nil), r)
		wantCalls(t, "a cold replay", map[string]int{"TransactWriteItems": 1})
		again := s.refund(t, "acme", "refund-nothing-left", rest, nil)
		wantProblem(t, again, http.StatusBadRequest, "amount_exceeds_refundable", "")
		s.calls.take()
	})

	t.Run("not refundable", func(t *testing.T) {
		r := s.do(t, request{tenant: "acme", keys: []string{"pending-payment"}, body: `{"amount": 100, "currency": "EUR", "customer": "c"}`})
		pending := paid{tenant: "acme", id: decode(t, r)["id"].(string)}
		s.calls.take()
		body := refundBody(pending, 0, "")
		first := s.refund(t, "acme", "refund-pending", body, nil)
		wantProblem(t, first, http.StatusBadRequest, "payment_not_refundable", "")
		wantCalls(t, "a refusal", map[string]int{"TransactWriteItems": 2})
		wantReplay(t, s.refund(t, "acme", "refund-pending", body, nil), first)
		s.calls.take()
	})

	t.Run("no such payment", func(t *testing.T) {
		for _, tt := range []struct{ tenant, key, body string }{
			{"acme", "refund-missing", refundBody(paid{id: "pay_aaaaaaaaaaaaaaaaaaaaaaaa"}, 0, "")},
			{"globex", "refund-of-acme", refundBody(p, 1, "")}, // another tenant's payment does not exist
		} {
			r := s.refund(t, tt.tenant, tt.key, tt.body, nil)
			wantProblem(t, r, http.StatusNotFound, "not_found", "")
			wantCalls(t, "a refusal", map[string]int{"TransactWriteItems": 2})
			wantReplay(t, s.refund(t, tt.tenant, tt.key, tt.body, nil), r)
			s.calls.take()
		}
	})

	t.Run("key reused with another body", func(t *testing.T) {
		s.restart()
		r := s.refund(t, "acme", "refund-1", refundBody(p, 701, ""), nil)
		wantProblem(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused", "")
		wantCalls(t, "a mismatch, cold", map[string]int{"TransactWriteItems": 1})
	})

	t.Run("invalid requests reserve nothing", func(t *testing.T) {
		tests := []struct {
			name, body string
			field      any
		}{
			{"payment missing", `{"amount": 1}`, "payment"},
			{"payment not an id", `{"payment": "pay_1"}`, "payment"},
			{"payment a number", `{"payment": 7}`, "payment"},
			{"amount zero", `{"payment": "` + p.id + `", "amount": 0}`, "amount"},
			{"amount negative", `{"payment": "` + p.id + `", "amount": -5}`, "amount"},
			{"amount a string", `{"payment": "` + p.id + `", "amount": "5"}`, "amount"},
			{"amount a fraction", `{"payment": "` + p.id + `", "amount": 1.5}`, "amount"},
			{"reason", `{"payment": "` + p.id + `", "reason": "changed_mind"}`, "reason"},
			{"metadata", `{"payment": "` + p.id + `", "metadata": {"k": 1}}`, "metadata.k"},
			{"unknown field", `{"payment": "` + p.id + `", "currency": "eur"}`, "currency"},
			{"not an object", `[]`, nil},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				key := fmt.Sprintf("refund-invalid-%d", i)
				r := s.refund(t, "acme", key, tt.body, nil)
				wantProblem(t, r, http.StatusBadRequest, "invalid_request", "")
				if got := problem(t, r)["field"]; got != tt.field {
					t.Errorf("field = %v, want %v", got, tt.field)
				}
				if _, err := s.refundRecord(t, "acme", key); !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("record after 400: %v, want none", err)
				}
			})
		}
		wantCalls(t, "validation errors", map[string]int{})
	})

	t.Run("provider unavailable: nothing stored, nothing held", func(t *testing.T) {
		q := s.payment(t, "acme", 900, "tok_refundUnavailable", "")
		body := refundBody(q, 400, "")
		for i := range 2 {
			r := s.refund(t, "acme", "refund-unavailable", body, nil)
			wantProblem(t, r, http.StatusServiceUnavailable, "provider_unavailable", "1")
			if i == 0 {
				// Reserve with the hold, read the payment, release with the
				// hold given back.
				wantCalls(t, "an unavailable provider", map[string]int{"TransactWriteItems": 2, "GetItem": 1})
			}
			if _, err := s.refundRecord(t, "acme", "refund-unavailable"); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record after attempt %d: %v, want none (released)", i+1, err)
			}
			s.wantSettled(t, q, 0)
		}
		s.calls.take()
	})

	t.Run("provider rejects: stored, nothing held", func(t *testing.T) {
		// A payment whose charge the provider does not know.
		q := s.payment(t, "acme", 900, "tok_visa", "prch_unknown_to_the_provider")
		body := refundBody(q, 400, "")
		r := s.refund(t, "acme", "refund-rejected", body, nil)
		wantProblem(t, r, http.StatusUnprocessableEntity, "provider_rejected", "")
		wantCalls(t, "a provider rejection", map[string]int{"TransactWriteItems": 2, "GetItem": 1})
		wantReplay(t, s.refund(t, "acme", "refund-rejected", body, nil), r)
		got := s.stored(t, q)
		if got.AmountRefunded != 0 || got.Refundable != 900 || len(got.Holds) != 0 {
			t.Errorf("payment = refunded %d, refundable %d, holds %v; want 0, 900, none", got.AmountRefunded, got.Refundable, got.Holds)
		}
		s.calls.take()
	})

	t.Run("outcome unknown, then reconciled", func(t *testing.T) {
		q := s.payment(t, "acme", 900, "tok_refundTimeout", "")
		body := refundBody(q, 0, "fraudulent") // the whole payment
		start := time.Now()
		r := s.refund(t, "acme", "refund-timeout", body, nil)
		wantProblem(t, r, http.StatusGatewayTimeout, "provider_outcome_unknown", "2")
		if took := time.Since(start); took > chargeTimeout+2*time.Second {
			t.Errorf("504 took %v, want about the provider timeout %v", took, chargeTimeout)
		}
		// Reserve with the hold, read the payment, mark UNKNOWN.
		wantCalls(t, "an unknown outcome", map[string]int{"TransactWriteItems": 1, "GetItem": 1, "UpdateItem": 1})
		rec, err := s.refundRecord(t, "acme", "refund-timeout")
		wantStatus(t, "refund-timeout", rec, err, idempotency.StatusUnknown)
		if held := s.stored(t, q).Holds; len(held) != 1 {
			t.Errorf("holds while UNKNOWN = %v, want the refund's", held)
		}
		wantProblem(t, s.refund(t, "acme", "refund-timeout", body, nil), http.StatusConflict, "idempotency_request_in_progress", "2")

		s.reconcile(t, "acme", "refund-timeout")
		again := s.refund(t, "acme", "refund-timeout", body, nil)
		if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || decode(t, again)["amount"] != 900.0 {
			t.Fatalf("retry after reconciliation = %d %s, want the 201 of 900 replayed", again.status, again.body)
		}
		rec, err = s.refundRecord(t, "acme", "refund-timeout")
		if err != nil {
			t.Fatal(err)
		}
		lookup, err := s.provider.LookupRefund(t.Context(), rec.ForwardKey())
		if err != nil {
			t.Fatal(err)
		}
		if want, err := refunds.Response(rec, lookup); err != nil || string(want.Body) != string(again.body) || want.Header["Location"] != again.header.Get("Location") {
			t.Errorf("reconciled answer = %s, Response() = %s, %v; want the same", again.body, want.Body, err)
		}
		s.wantSettled(t, q, 900)
		s.calls.take()
	})

	t.Run("a refund's key after its record expired", func(t *testing.T) {
		// A key whose refund exists names no other, even once its record
		// is gone: the check in the reservation's transaction refuses it.
		dynamotest.Delete(t, s.client, s.names.ByLogicalID["IdempotencyTable"], idempotency.NewKey("acme", "refund-1").ID())
		q := s.payment(t, "acme", 500, "tok_visa", "")
		r := s.refund(t, "acme", "refund-1", refundBody(q, 100, ""), nil)
		wantProblem(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused", "")
		s.wantSettled(t, q, 0)
		s.calls.take()
	})
}

// providerCalls counts the simulator's POST requests to path by
// Idempotency-Key: the calls made, whatever the simulator did with them (it
// never forgets a key, so a repeated call would not show as a second
// charge or refund).
type providerCalls struct {
	path  string
	mu    sync.Mutex
	byKey map[string]int
}

func (c *providerCalls) option() stackOption {
	c.byKey = map[string]int{}
	return func(setup *stackSetup) {
		setup.simWrap = func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && r.URL.Path == c.path {
					c.mu.Lock()
					c.byKey[r.Header.Get("Idempotency-Key")]++
					c.mu.Unlock()
				}
				next.ServeHTTP(w, r)
			})
		}
	}
}

func (c *providerCalls) of(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byKey[key]
}

// retryRefund retries a refund as a client does until its answer is final,
// while time passes: a 409 moves the clock past the lease (the reservation
// is then handed to reconciliation), and an UNKNOWN record is reconciled as
// the reconciler function would from its stream record. It returns the final
// answer.
func (s *stack) retryRefund(t testing.TB, tenant, key, body string) response {
	t.Helper()
	for range 8 {
		r := s.refund(t, tenant, key, body, nil)
		if r.status != http.StatusConflict && r.status != http.StatusServiceUnavailable && r.status != http.StatusGatewayTimeout {
			return r
		}
		rec, err := s.refundRecord(t, tenant, key)
		switch {
		case err == nil && rec.Status == idempotency.StatusUnknown:
			s.reconcile(t, tenant, key)
		case err == nil && rec.Status == idempotency.StatusInProgress:
			s.clock.Advance(s.cfg.Lease + time.Second)
		}
	}
	t.Fatalf("refund %s: no final answer after 8 attempts", key)
	return response{}
}

// TestRefundsFaultInjection crashes the function at each fault point of a
// refund, of an amount and of all that is left: after the client's retries
// (and the reconciliation they lead to), one refund at the provider per key,
// called once, the payment's amount_refunded right, nothing left held.
func TestRefundsFaultInjection(t *testing.T) {
	calls := providerCalls{path: "/v1/refunds"}
	s := newRefundStack(t, calls.option())
	for _, point := range []string{"after-reserve", "after-provider-call", "after-complete"} {
		for _, amount := range []int64{300, 0} {
			t.Run(fmt.Sprintf("%s/amount %d", point, amount), func(t *testing.T) {
				p := s.payment(t, "acme", 1000, "tok_visa", "")
				key := fmt.Sprintf("refund-crash-%s-%d", point, amount)
				body := refundBody(p, amount, "")
				r := s.refund(t, "acme", key, body, map[string][]string{"Once-Fault": {point}})
				wantCrash(t, r, point)
				held := s.stored(t, p)
				if point != "after-complete" && len(held.Holds) != 1 {
					t.Errorf("holds after the crash = %v, want the refund's", held.Holds)
				}

				final := s.retryRefund(t, "acme", key, body)
				want := amount
				if want == 0 {
					want = p.amount
				}
				if final.status != http.StatusCreated || decode(t, final)["amount"] != float64(want) {
					t.Fatalf("final answer = %d %s, want 201 of %d", final.status, final.body, want)
				}
				wantReplay(t, s.refund(t, "acme", key, body, nil), final)
				if n := calls.of(refundForwardKey(t, "acme", key, body)); n != 1 {
					t.Errorf("provider called %d times for the key, want 1", n)
				}
				s.wantSettled(t, p, want)
			})
		}
	}
}

// TestRefundsConcurrent races refunds of one payment under different keys,
// each sent several times at once, against a slow provider, with another
// tenant trying to refund the same payment: they never add up to more than
// the payment, the provider is called at most once per key, and the other
// tenant takes nothing.
func TestRefundsConcurrent(t *testing.T) {
	calls := providerCalls{path: "/v1/refunds"}
	s := newRefundStack(t, calls.option())
	p := s.payment(t, "acme", 1000, "tok_refundSlow", "") // each refund takes 300ms at the provider
	const keys, dups, amount = 10, 3, 150
	body := refundBody(p, amount, "")
	answers := make([][dups]response, keys)
	var foreign [keys]response
	start := make(chan struct{})
	var wg sync.WaitGroup
	for k := range keys {
		for d := range dups {
			wg.Go(func() {
				<-start
				answers[k][d] = s.refund(t, "acme", fmt.Sprintf("race-%d", k), body, nil)
			})
		}
		wg.Go(func() {
			<-start
			foreign[k] = s.refund(t, "globex", fmt.Sprintf("race-%d", k), body, nil)
		})
	}
	close(start)
	wg.Wait()

	refunded, refused := 0, 0
	for k := range keys {
		key := fmt.Sprintf("race-%d", k)
		for _, r := range answers[k] {
			switch r.status {
			case http.StatusCreated, http.StatusBadRequest, http.StatusConflict:
			case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
				// A loaded machine: a store or provider call ran out of
				// time; the retries below reach the final answer.
			default:
				t.Errorf("%s: %d %s, want 201, 400, 409, or 503 or 504 under load", key, r.status, r.body)
			}
		}
		// The client retries what was not final.
		final := s.retryRefund(t, "acme", key, body)
		switch {
		case final.status == http.StatusCreated:
			refunded++
		case final.status == http.StatusBadRequest && problem(t, final)["code"] == "amount_exceeds_refundable":
			refused++
		default:
			t.Errorf("%s: final answer %d %s", key, final.status, final.body)
		}
		for _, r := range answers[k] {
			if r.status/100 != 2 && r.status != http.StatusBadRequest {
				continue
			}
			if r.status != final.status || string(r.body) != string(final.body) {
				t.Errorf("%s answered %d %s and %d %s", key, r.status, r.body, final.status, final.body)
			}
		}
		if n := calls.of(refundForwardKey(t, "acme", key, body)); n > 1 {
			t.Errorf("%s: provider called %d times, want at most 1", key, n)
		}
		if r := foreign[k]; r.status != http.StatusNotFound {
			t.Errorf("globex %s: %d %s, want 404 (acme's payment does not exist for globex)", key, r.status, r.body)
		}
		if n := calls.of(refundForwardKey(t, "globex", key, body)); n != 0 {
			t.Errorf("globex %s: provider called %d times, want 0", key, n)
		}
	}
	// 1000 / 150: six refunds fit, the others are refused, whatever the
	// interleaving.
	if refunded != 6 || refused != keys-6 {
		t.Errorf("%d refunded, %d refused; want 6 and %d", refunded, refused, keys-6)
	}
	s.wantSettled(t, p, 6*amount)
	t.Logf("DynamoDB calls: %v", func() map[string]int { ops, _ := s.calls.take(); return ops }())
}

// TestRefundReleasedWhileRunning: the reservation is released, its hold
// given back, while the request is still at the provider (a reconciler
// that found nothing yet, or an operator). The request's completion then
// finds no reservation and records its outcome afresh, with the hold taken
// again; when that cannot be written, the retry runs again and the
// provider answers it with the same refund. Either way: one refund, counted
// once, nothing held.
func TestRefundReleasedWhileRunning(t *testing.T) {
	calls := providerCalls{path: "/v1/refunds"}
	s := newRefundStack(t, calls.option())
	p := s.payment(t, "acme", 1000, "tok_refundSlow", "") // the provider answers after 300ms
	const key = "refund-released"
	body := refundBody(p, 300, "")
	done := make(chan response, 1)
	go func() { done <- s.refund(t, "acme", key, body, nil) }()
	var rec idempotency.Record
	lambdatest.WaitFor(t, 5*time.Second, "the reservation", func() bool {
		var err error
		rec, err = s.refundRecord(t, "acme", key)
		return err == nil && rec.Status == idempotency.StatusInProgress
	})
	release := dynamo.Update{
		Table:     s.names.ByLogicalID["PaymentsTable"],
		Key:       map[string]any{payments.KeyAttr: payments.PK("acme", p.id)},
		Update:    "SET #refundable = #refundable + #holds.#key REMOVE #holds.#key",
		Condition: "attribute_exists(#holds.#key)",
		Names:     map[string]string{"#refundable": payments.AttrRefundable, "#holds": payments.AttrHolds, "#key": rec.Key.Hash},
	}
	if err := dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"]).Release(t.Context(), rec.Key, rec.LeaseToken, []idempotency.Effect{release}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	first := <-done
	t.Logf("the request whose reservation was released answered %d %s", first.status, first.body)
	final := first
	if first.status != http.StatusCreated {
		final = s.retryRefund(t, "acme", key, body)
	}
	if final.status != http.StatusCreated || decode(t, final)["amount"] != 300.0 {
		t.Fatalf("final answer = %d %s, want 201 of 300", final.status, final.body)
	}
	wantReplay(t, s.refund(t, "acme", key, body, nil), final)
	if n := calls.of(refundForwardKey(t, "acme", key, body)); n > 2 {
		t.Errorf("provider called %d times for the key, want at most 2 (the first request and its retry)", n)
	}
	s.wantSettled(t, p, 300)
}
