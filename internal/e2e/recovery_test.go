package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/httpapi"
)

// TestSameKeyOtherRoute reuses a key on a second idempotent route that
// shares the idempotency table: the key names one request, whatever the route.
func TestSameKeyOtherRoute(t *testing.T) {
	s := newStack(t, func(setup *stackSetup) {
		setup.wrap = func(s *stack, api http.Handler) http.Handler {
			mw, err := idempotency.New(idempotency.Config{
				Store:   dynamo.New(s.calls.wrap(s.client), s.names.ByLogicalID["IdempotencyTable"]),
				Tenant:  apigw.Tenant,
				OnError: httpapi.WriteError,
			})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /v1/orders", mw.Wrap(idempotency.Atomic, "POST /v1/orders", http.HandlerFunc(
				func(w http.ResponseWriter, r *http.Request) {
					if _, ok := idempotency.Begin(w, r); !ok {
						return
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write([]byte(`{"object":"order"}`))
				})))
			mux.Handle("/", api)
			return mux
		}
	})
	if r := s.do(t, request{tenant: "acme", keys: []string{"route-key"}, body: body1001}); r.status != http.StatusCreated {
		t.Fatalf("POST /v1/payments = %d %s, want 201", r.status, r.body)
	}
	s.calls.take()
	r := s.do(t, request{path: "/v1/orders", tenant: "acme", keys: []string{"route-key"}, body: body1001})
	if r.status != http.StatusUnprocessableEntity || problem(t, r)["code"] != "idempotency_key_reused" {
		t.Errorf("same key and body on POST /v1/orders = %d %s, want 422 idempotency_key_reused", r.status, r.body)
	}
	if ops, n := s.calls.take(); n != 1 {
		t.Errorf("mismatch made %d DynamoDB calls (%v), want 1", n, ops)
	}
	// And the other way round.
	if r := s.do(t, request{path: "/v1/orders", tenant: "acme", keys: []string{"order-key"}, body: body1001}); r.status != http.StatusCreated {
		t.Fatalf("POST /v1/orders = %d %s, want 201", r.status, r.body)
	}
	if r := s.do(t, request{tenant: "acme", keys: []string{"order-key"}, body: body1001}); r.status != http.StatusUnprocessableEntity {
		t.Errorf("order key on POST /v1/payments = %d %s, want 422", r.status, r.body)
	}
	if n := len(s.payments(t)); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
}

// TestRetention moves the clock past the retention, as short as the
// middleware takes (the lease, and the UNKNOWN redrive interval): the key
// executes anew although DynamoDB's TTL has not deleted the record.
func TestRetention(t *testing.T) {
	s := newStack(t, withConfig(func(c *config.Config) { c.Retention = max(c.Lease, idempotency.DefaultUnknownRedrive) }))
	first := s.do(t, request{tenant: "acme", keys: []string{"short-lived"}, body: body1001})
	if first.status != http.StatusCreated {
		t.Fatalf("POST = %d %s, want 201", first.status, first.body)
	}
	s.clock.Advance(s.cfg.Retention - 100*time.Millisecond)
	if r := s.do(t, request{tenant: "acme", keys: []string{"short-lived"}, body: body1001}); r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("POST within the retention = %d %s, want a replay", r.status, r.body)
	}
	s.clock.Advance(200 * time.Millisecond)

	key := idempotency.NewKey("acme", "short-lived")
	out, err := s.client.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName:      aws.String(s.names.ByLogicalID["IdempotencyTable"]),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key.ID()}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil || out.Item == nil {
		t.Fatalf("the expired record is gone before the test could use it (%v)", err)
	}
	s.calls.take()
	second := s.do(t, request{tenant: "acme", keys: []string{"short-lived"}, body: body1001})
	if second.status != http.StatusCreated || second.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("POST after the retention = %d %v %s, want a fresh 201", second.status, second.header, second.body)
	}
	if decode(t, second)["id"] == decode(t, first)["id"] {
		t.Errorf("POST after the retention returned the old payment")
	}
	if ops, n := s.calls.take(); n != 1 {
		t.Errorf("re-execution made %d DynamoDB calls (%v), want 1", n, ops)
	}
	if n := len(s.payments(t)); n != 2 {
		t.Errorf("%d payments, want 2", n)
	}
	// The new record is stored and replays.
	if r := s.do(t, request{tenant: "acme", keys: []string{"short-lived"}, body: body1001}); string(r.body) != string(second.body) {
		t.Errorf("replay after re-execution = %s, want %s", r.body, second.body)
	}
}

// TestStoreUnavailable points the function at a closed port.
func TestStoreUnavailable(t *testing.T) {
	const dead = "http://127.0.0.1:1"
	s := newStack(t, func(setup *stackSetup) {
		setup.client = func(t testing.TB, _ *dynamodb.Client) *dynamodb.Client {
			cfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: dead, MaxAttempts: 2, MaxBackoff: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return dynamoclient.New(cfg, dead)
		}
	})
	r := s.do(t, request{tenant: "acme", keys: []string{"outage"}, body: body1001})
	if r.status != http.StatusServiceUnavailable || problem(t, r)["code"] != "store_unavailable" || r.header.Get("Retry-After") != "1" {
		t.Errorf("POST = %d %v %s, want 503 store_unavailable with Retry-After: 1", r.status, r.header, r.body)
	}
	if strings.Contains(string(r.body), "127.0.0.1") || strings.Contains(string(r.body), "dial") {
		t.Errorf("503 body %s leaks the internal error", r.body)
	}
	g := s.do(t, request{method: "GET", path: "/v1/payments/pay_abcdefghijklmnopqrstuvwx", tenant: "acme"})
	if g.status != http.StatusServiceUnavailable || problem(t, g)["code"] != "store_unavailable" {
		t.Errorf("GET = %d %s, want 503 store_unavailable", g.status, g.body)
	}
	if n := len(s.payments(t)); n != 0 {
		t.Errorf("%d payments written during the outage, want 0", n)
	}
	lines := s.logs.Lines(t)
	if len(lines) != 2 || lines[0]["outcome"] != "store_error" || lines[0]["level"] != "ERROR" {
		t.Fatalf("log lines = %v, want a store_error line per request", lines)
	}
	for _, l := range lines {
		if e, _ := l["error"].(string); !strings.Contains(e, "127.0.0.1:1") {
			t.Errorf("log line error = %q, want the store error", e)
		}
	}
	if !strings.Contains(s.metrics.String(), `"reserve_store_error":1`) {
		t.Errorf("metrics = %s, want reserve_store_error", s.metrics)
	}
}

// TestConcurrentDuplicates sends each of 100 keys 10 times at once, then
// retries whatever failed: every key ends with exactly one payment, and every
// 201 for a key is the same bytes.
//
// A store error (503) is possible here on a loaded machine: DynamoDB Local
// serialises transactions, and a commit that outlives the client's timeout
// may still land. That is the ambiguous outcome the design must absorb: the
// retry with the same key replays what landed, or runs if nothing did.
func TestConcurrentDuplicates(t *testing.T) {
	const keys, dups = 100, 10
	s := newStack(t, func(setup *stackSetup) {
		setup.client = func(t testing.TB, _ *dynamodb.Client) *dynamodb.Client {
			endpoint := dynamotest.Endpoint(t)
			cfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: endpoint, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return dynamoclient.New(cfg, endpoint)
		}
	})
	send := func(k int) response {
		return s.do(t, request{
			tenant: "acme", keys: []string{fmt.Sprintf("concurrent-%d", k)},
			body: fmt.Sprintf(`{"amount": %d, "currency": "usd", "customer": "c"}`, k+1),
		})
	}
	answers := make([][dups]response, keys)
	sem := make(chan struct{}, 10) // keys in flight: 100 concurrent requests
	var wg sync.WaitGroup
	for k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			start := make(chan struct{})
			var kwg sync.WaitGroup
			for d := range dups {
				kwg.Go(func() {
					<-start
					answers[k][d] = send(k)
				})
			}
			close(start)
			kwg.Wait()
		})
	}
	wg.Wait()
	ops, _ := s.calls.take()
	t.Logf("DynamoDB operations for %d concurrent requests: %v", keys*dups, ops)

	ids := map[string]bool{}
	failed, replays := 0, 0
	for k := range keys {
		var ok []response
		for _, r := range answers[k] {
			switch r.status {
			case http.StatusCreated:
				ok = append(ok, r)
				if r.header.Get("Idempotent-Replayed") == "true" {
					replays++
				}
			case http.StatusServiceUnavailable:
				failed++
			default:
				t.Errorf("key %d: %d %s, want 201 (or 503 under load)", k, r.status, r.body)
			}
		}
		// The retry after the storm.
		retry := send(k)
		if retry.status != http.StatusCreated {
			t.Errorf("key %d retry = %d %s, want 201", k, retry.status, retry.body)
			continue
		}
		for _, r := range ok {
			if string(r.body) != string(retry.body) {
				t.Errorf("key %d answered %s and %s", k, r.body, retry.body)
			}
		}
		ids[decode(t, retry)["id"].(string)] = true
	}
	if failed > 0 {
		t.Logf("%d of %d requests got 503 (store timeouts under load); their retries converged", failed, keys*dups)
	}
	if failed == 0 && replays != keys*(dups-1) {
		t.Errorf("%d replays, want %d", replays, keys*(dups-1))
	}
	ps := s.payments(t)
	if len(ps) != keys || len(ids) != keys {
		t.Errorf("%d payments in the table, %d distinct ids answered; want %d each", len(ps), len(ids), keys)
	}
	for _, p := range ps {
		if !ids[p.ID] {
			t.Errorf("payment %s in the table was never answered", p.ID)
		}
	}
}

// TestFaultInjection crashes the function after the commit: a function
// error, then the retry, in a new instance, replays the payment that was made.
func TestFaultInjection(t *testing.T) {
	s := newStack(t, withConfig(func(c *config.Config) { c.FaultInjection = true }))
	for _, point := range []string{"after-reserve", "after-complete"} {
		t.Run(point, func(t *testing.T) {
			key := "crash-" + point
			r := s.do(t, request{tenant: "acme", keys: []string{key}, body: body1001, header: map[string][]string{"Once-Fault": {point}}})
			wantCrash(t, r, point)
			again := s.do(t, request{tenant: "acme", keys: []string{key}, body: body1001})
			if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry = %d %v %s, want the committed 201 replayed", again.status, again.header, again.body)
			}
		})
	}
	t.Run("unknown point is ignored", func(t *testing.T) {
		r := s.do(t, request{tenant: "acme", keys: []string{"crash-unknown"}, body: body1001, header: map[string][]string{"Once-Fault": {"before-everything"}}})
		if r.status != http.StatusCreated {
			t.Errorf("POST = %d %s, want 201", r.status, r.body)
		}
	})
	if n := len(s.payments(t)); n != 3 {
		t.Errorf("%d payments, want 3 (one per key)", n)
	}
	var crashes int
	for _, l := range s.logs.Lines(t) {
		if l["crash"] != nil {
			crashes++
			if l["status"] != 500.0 {
				t.Errorf("crash log line = %v, want status 500", l)
			}
		}
	}
	if crashes != 2 {
		t.Errorf("%d crash log lines, want 2", crashes)
	}

	t.Run("disabled", func(t *testing.T) {
		off := newStack(t)
		r := off.do(t, request{tenant: "acme", keys: []string{"k"}, body: body1001, header: map[string][]string{"Once-Fault": {"after-complete"}}})
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("POST with injection disabled = %d %s, want a plain 201", r.status, r.body)
		}
	})
}
