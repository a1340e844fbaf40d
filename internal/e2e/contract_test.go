package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/payments"
)

const body1001 = `{"amount": 2500, "currency": "EUR", "customer": "cus_42", "description": "Order 1001", "metadata": {"order": "1001", "channel": "web"}}`

// TestContract walks issue #2's contract through REST API (payload 1.0)
// events, counting the DynamoDB operations of each outcome.
func TestContract(t *testing.T) {
	s := newStack(t)
	s.calls.take()

	// wantCalls checks the DynamoDB operations since the last check.
	wantCalls := func(t *testing.T, what string, want map[string]int) {
		t.Helper()
		got, _ := s.calls.take()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("DynamoDB calls for %s (-want +got):\n%s", what, diff)
		}
	}
	none := map[string]int{}
	one := func(op string) map[string]int { return map[string]int{op: 1} }

	first := s.do(t, request{tenant: "acme", keys: []string{"order-1001"}, body: body1001})
	var created map[string]any
	t.Run("create", func(t *testing.T) {
		if first.status != http.StatusCreated {
			t.Fatalf("POST = %d %s, want 201", first.status, first.body)
		}
		created = decode(t, first)
		id, _ := created["id"].(string)
		if !payments.ValidID(id) {
			t.Fatalf("id = %v, want pay_ and 24 characters", created["id"])
		}
		want := map[string]any{
			"id": id, "object": "payment", "amount": 2500.0, "amount_refunded": 0.0, "currency": "eur", "customer": "cus_42",
			"description": "Order 1001", "metadata": map[string]any{"order": "1001", "channel": "web"},
			"status": "pending", "provider_charge_id": nil, "failure_code": nil, "created": float64(s.clock.Now().Unix()),
		}
		if diff := cmp.Diff(want, created); diff != "" {
			t.Errorf("body (-want +got):\n%s", diff)
		}
		// The keys come out in a fixed order, as documented.
		if !strings.HasPrefix(string(first.body), `{"id":"`+id+`","object":"payment","amount":2500,"amount_refunded":0,"currency":"eur","customer":"cus_42","description":"Order 1001","metadata":{"channel":"web","order":"1001"},"status":"pending","provider_charge_id":null,"failure_code":null,"created":`) {
			t.Errorf("body = %s, want the contract's field order", first.body)
		}
		if got := first.header.Get("Location"); got != "/v1/payments/"+id {
			t.Errorf("Location = %q, want /v1/payments/%s", got, id)
		}
		if got := first.header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", got)
		}
		if got := first.header.Values("Idempotent-Replayed"); len(got) != 0 {
			t.Errorf("first response Idempotent-Replayed = %q, want absent", got)
		}
		wantCalls(t, "a first request", one("TransactWriteItems"))

		ps := s.payments(t)
		if len(ps) != 1 || ps[0].ID != id || ps[0].Tenant != "acme" || ps[0].Status != payments.StatusPending ||
			ps[0].Source != "tok_visa" || ps[0].PK != "acme#"+id {
			t.Errorf("payments table = %+v, want the one pending payment", ps)
		}
	})

	replayCheck := func(t *testing.T, r response) {
		t.Helper()
		wantReplay(t, r, first)
		if got, want := r.header.Get("Location"), first.header.Get("Location"); got != want {
			t.Errorf("replay Location = %q, want %q", got, want)
		}
	}
	t.Run("replay", func(t *testing.T) {
		// The instance that stored the answer replays it from its cache.
		r := s.do(t, request{tenant: "acme", keys: []string{"order-1001"}, body: body1001})
		replayCheck(t, r)
		wantCalls(t, "a replay on a warm instance", map[string]int{})
	})
	t.Run("replay on another instance", func(t *testing.T) {
		s.restart()
		r := s.do(t, request{tenant: "acme", keys: []string{"order-1001"}, body: body1001})
		replayCheck(t, r)
		wantCalls(t, "a replay on a cold instance", one("TransactWriteItems"))
	})
	t.Run("key order and whitespace do not matter", func(t *testing.T) {
		reordered := "{\n  \"metadata\": {\"channel\":\"web\", \"order\":\"1001\"},\n\t\"description\":\"Order 1001\",\"customer\":\"cus_42\",\r\n\"currency\":\"EUR\",  \"amount\":2500 }"
		replayCheck(t, s.do(t, request{tenant: "acme", keys: []string{"order-1001"}, body: reordered}))
		wantCalls(t, "a reordered replay", map[string]int{})
	})
	t.Run("sf-string key equals the bare token", func(t *testing.T) {
		replayCheck(t, s.do(t, request{tenant: "acme", keys: []string{`"order-1001"`}, body: body1001}))
		wantCalls(t, "a replay", map[string]int{})
	})
	t.Run("different body", func(t *testing.T) {
		r := s.do(t, request{tenant: "acme", keys: []string{"order-1001"}, body: strings.Replace(body1001, "2500", "2501", 1)})
		if r.status != http.StatusUnprocessableEntity || problem(t, r)["code"] != "idempotency_key_reused" {
			t.Errorf("POST = %d %s, want 422 idempotency_key_reused", r.status, r.body)
		}
		wantCalls(t, "a mismatch on a warm instance", map[string]int{})
		s.restart()
		r = s.do(t, request{tenant: "acme", keys: []string{"order-1001"}, body: strings.Replace(body1001, "2500", "2501", 1)})
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("POST on a cold instance = %d %s, want 422", r.status, r.body)
		}
		wantCalls(t, "a mismatch on a cold instance", one("TransactWriteItems"))
	})
	t.Run("same semantics, other spelling, is another request", func(t *testing.T) {
		// "EUR" and "eur" create the same payment, but the fingerprint is of
		// the body as sent (canonicalized), as Stripe compares parameters.
		r := s.do(t, request{tenant: "acme", keys: []string{"order-1001"}, body: strings.Replace(body1001, "EUR", "eur", 1)})
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("POST = %d %s, want 422", r.status, r.body)
		}
		s.calls.take()
	})

	t.Run("key errors", func(t *testing.T) {
		tests := []struct {
			name string
			keys []string
			code string
		}{
			{"missing", nil, "idempotency_key_missing"},
			{"repeated", []string{"a", "b"}, "idempotency_key_invalid"},
			{"repeated identical", []string{"a", "a"}, "idempotency_key_invalid"},
			{"empty", []string{""}, "idempotency_key_invalid"},
			{"empty sf-string", []string{`""`}, "idempotency_key_invalid"},
			{"too long", []string{strings.Repeat("k", 256)}, "idempotency_key_invalid"},
			{"space", []string{"order 1001"}, "idempotency_key_invalid"},
			{"non-ASCII", []string{"ordér"}, "idempotency_key_invalid"},
			{"bad sf-string", []string{`"unterminated`}, "idempotency_key_invalid"},
			{"sf-string with parameters", []string{`"k";a=1`}, "idempotency_key_invalid"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := s.do(t, request{tenant: "acme", keys: tt.keys, body: body1001})
				if r.status != http.StatusBadRequest || problem(t, r)["code"] != tt.code {
					t.Errorf("POST = %d %s, want 400 %s", r.status, r.body, tt.code)
				}
				wantCalls(t, "a key error", none)
			})
		}
		r := s.do(t, request{tenant: "acme", keys: []string{strings.Repeat("k", 255)}, body: body1001})
		if r.status != http.StatusCreated {
			t.Errorf("POST with a 255-character key = %d %s, want 201", r.status, r.body)
		}
		s.calls.take()
	})

	t.Run("payload too large", func(t *testing.T) {
		big := `{"amount":1,"currency":"usd","customer":"c","description":"` + strings.Repeat("x", 64<<10) + `"}`
		r := s.do(t, request{tenant: "acme", keys: []string{"big"}, body: big})
		if r.status != http.StatusRequestEntityTooLarge || problem(t, r)["code"] != "payload_too_large" {
			t.Errorf("POST = %d %s, want 413 payload_too_large", r.status, r.body)
		}
		wantCalls(t, "413", none)
		exact := `{"amount":1,"currency":"usd","customer":"c","metadata":{"a":"` + strings.Repeat("x", 500) + `"},"description":null}`
		exact += strings.Repeat(" ", 64<<10-len(exact))
		if r := s.do(t, request{tenant: "acme", keys: []string{"exactly-64k"}, body: exact}); r.status != http.StatusCreated {
			t.Errorf("POST of exactly 64 KiB = %d %s, want 201", r.status, r.body)
		}
		s.calls.take()
	})

	t.Run("unsupported media type", func(t *testing.T) {
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/vnd.api+json", "application/json; charset=utf-16"} {
			r := s.do(t, request{tenant: "acme", keys: []string{"media"}, ct: ptr(ct), body: body1001})
			if r.status != http.StatusUnsupportedMediaType || problem(t, r)["code"] != "unsupported_media_type" {
				t.Errorf("POST with Content-Type %q = %d %s, want 415", ct, r.status, r.body)
			}
		}
		wantCalls(t, "415", none)
		if r := s.do(t, request{tenant: "acme", keys: []string{"media"}, ct: ptr("Application/JSON; charset=UTF-8"), body: body1001}); r.status != http.StatusCreated {
			t.Errorf("POST with Content-Type Application/JSON; charset=UTF-8 = %d %s, want 201", r.status, r.body)
		}
		s.calls.take()
	})

	t.Run("invalid requests name the field", func(t *testing.T) {
		tests := []struct {
			body  string
			field any
		}{
			{`{"amount": 2500, "currency": "EUR"`, nil},
			{`[]`, nil},
			{`{"amount": 0, "currency": "EUR", "customer": "c"}`, "amount"},
			{`{"amount": 100000000, "currency": "EUR", "customer": "c"}`, "amount"},
			{`{"amount": 25.5, "currency": "EUR", "customer": "c"}`, "amount"},
			{`{"amount": "2500", "currency": "EUR", "customer": "c"}`, "amount"},
			{`{"amount": 1, "amount": 2, "currency": "EUR", "customer": "c"}`, "amount"},
			{`{"amount": 1, "currency": "EURO", "customer": "c"}`, "currency"},
			{`{"amount": 1, "currency": "EUR"}`, "customer"},
			{`{"amount": 1, "currency": "EUR", "customer": ""}`, "customer"},
			{`{"amount": 1, "currency": "EUR", "customer": "c", "description": "` + strings.Repeat("d", 1001) + `"}`, "description"},
			{`{"amount": 1, "currency": "EUR", "customer": "c", "metadata": {"order": 1001}}`, "metadata.order"},
			{`{"amount": 1, "currency": "EUR", "customer": "c", "metadata": {"order": "1", "order": "2"}}`, "metadata.order"},
			{`{"amount": 1, "currency": "EUR", "customer": "c", "metadata": {"` + strings.Repeat("k", 41) + `": "v"}}`, "metadata." + strings.Repeat("k", 41)},
			{`{"amount": 1, "currency": "EUR", "customer": "c", "refund": true}`, "refund"},
		}
		for i, tt := range tests {
			r := s.do(t, request{tenant: "acme", keys: []string{fmt.Sprintf("invalid-%d", i)}, body: tt.body})
			if r.status != http.StatusBadRequest {
				t.Errorf("POST %.60s = %d %s, want 400", tt.body, r.status, r.body)
				continue
			}
			p := problem(t, r)
			if p["code"] != "invalid_request" || p["field"] != tt.field {
				t.Errorf("POST %.60s = %s, want invalid_request with field %v", tt.body, r.body, tt.field)
			}
			if _, ok := p["field"]; !ok {
				t.Errorf("POST %.60s = %s, want a field member", tt.body, r.body)
			}
		}
		wantCalls(t, "400", none)
	})

	t.Run("400 is not stored", func(t *testing.T) {
		bad := s.do(t, request{tenant: "acme", keys: []string{"fix-me"}, body: `{"amount": -1, "currency": "EUR", "customer": "c"}`})
		if bad.status != http.StatusBadRequest {
			t.Fatalf("POST = %d %s, want 400", bad.status, bad.body)
		}
		good := s.do(t, request{tenant: "acme", keys: []string{"fix-me"}, body: `{"amount": 1, "currency": "EUR", "customer": "c"}`})
		if good.status != http.StatusCreated || good.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("corrected POST = %d %s, want a fresh 201", good.status, good.body)
		}
		s.calls.take()
	})

	t.Run("tenants are independent", func(t *testing.T) {
		a := s.do(t, request{tenant: "acme", keys: []string{"shared-key"}, body: body1001})
		g := s.do(t, request{tenant: "globex", keys: []string{"shared-key"}, body: body1001})
		if a.status != http.StatusCreated || g.status != http.StatusCreated {
			t.Fatalf("POSTs = %d, %d, want 201, 201", a.status, g.status)
		}
		if g.header.Get("Idempotent-Replayed") != "" || decode(t, a)["id"] == decode(t, g)["id"] {
			t.Errorf("globex got acme's payment: %s / %s", a.body, g.body)
		}
		// Another tenant's payment does not exist.
		id := decode(t, a)["id"].(string)
		if r := s.do(t, request{method: "GET", path: "/v1/payments/" + id, tenant: "globex"}); r.status != http.StatusNotFound {
			t.Errorf("GET acme's payment as globex = %d %s, want 404", r.status, r.body)
		}
		s.calls.take()
	})

	t.Run("get", func(t *testing.T) {
		id := created["id"].(string)
		r := s.do(t, request{method: "GET", path: "/v1/payments/" + id, tenant: "acme"})
		if r.status != http.StatusOK || string(r.body) != string(first.body) {
			t.Errorf("GET = %d %s, want 200 %s", r.status, r.body, first.body)
		}
		if r.header.Get("Content-Type") != "application/json" {
			t.Errorf("GET Content-Type = %q", r.header.Get("Content-Type"))
		}
		wantCalls(t, "a GET", one("GetItem"))
		for _, path := range []string{"/v1/payments/" + payments.NewID(), "/v1/payments/not-an-id"} {
			r := s.do(t, request{method: "GET", path: path, tenant: "acme"})
			if r.status != http.StatusNotFound || problem(t, r)["code"] != "not_found" {
				t.Errorf("GET %s = %d %s, want 404 not_found", path, r.status, r.body)
			}
		}
		s.calls.take()
	})

	t.Run("no tenant", func(t *testing.T) {
		for _, rq := range []request{
			{keys: []string{"k"}, body: body1001},
			{method: "GET", path: "/v1/payments/" + created["id"].(string)},
		} {
			r := s.do(t, rq)
			if r.status != http.StatusUnauthorized || problem(t, r)["code"] != "unauthorized" {
				t.Errorf("%s without tenant = %d %s, want 401", rq.method, r.status, r.body)
			}
		}
		wantCalls(t, "401", none)
	})

	t.Run("unknown routes and methods", func(t *testing.T) {
		if r := s.do(t, request{method: "GET", path: "/v1/customers", tenant: "acme"}); r.status != http.StatusNotFound || problem(t, r)["code"] != "not_found" {
			t.Errorf("GET /v1/customers = %d %s, want 404", r.status, r.body)
		}
		r := s.do(t, request{method: "DELETE", path: "/v1/payments/" + created["id"].(string), tenant: "acme"})
		if r.status != http.StatusMethodNotAllowed || problem(t, r)["code"] != "method_not_allowed" || r.header.Get("Allow") == "" {
			t.Errorf("DELETE = %d %s (Allow %q), want 405 with Allow", r.status, r.body, r.header.Get("Allow"))
		}
		wantCalls(t, "404/405", none)
	})

	t.Run("log lines", func(t *testing.T) {
		lines := s.logs.Lines(t)
		if len(lines) < 20 {
			t.Fatalf("%d log lines, want one per request", len(lines))
		}
		for _, l := range lines {
			for _, k := range []string{"request_id", "tenant", "method", "route", "status", "outcome", "key", "store_calls", "store_latency_ms", "duration_ms"} {
				if _, ok := l[k]; !ok {
					t.Errorf("log line %v lacks %q", l, k)
				}
			}
			if id, _ := l["request_id"].(string); !strings.HasPrefix(id, "v1-") {
				t.Errorf("request_id = %q, want API Gateway's", id)
			}
		}
		firstLine := lines[0]
		if firstLine["outcome"] != "created" || firstLine["status"] != 201.0 || firstLine["tenant"] != "acme" ||
			firstLine["route"] != "POST /v1/payments" || firstLine["store_calls"] != 1.0 || len(firstLine["key"].(string)) != 12 {
			t.Errorf("first log line = %v", firstLine)
		}
		logs := s.logs.String()
		for _, secret := range []string{"order-1001", "sk_test_", "cus_42", "Order 1001", "shared-key", "fix-me"} {
			if strings.Contains(logs, secret) {
				t.Errorf("the logs contain %q", secret)
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		counts := map[string]int{}
		for _, m := range s.metrics.Lines(t) {
			aws := m["_aws"].(map[string]any)
			if _, ok := aws["Timestamp"].(float64); !ok {
				t.Errorf("EMF document without Timestamp: %v", m)
			}
			for _, d := range aws["CloudWatchMetrics"].([]any) {
				d := d.(map[string]any)
				if d["Namespace"] != "once" || !cmp.Equal(d["Dimensions"], []any{[]any{"Service"}}) || m["Service"] != "api" {
					t.Errorf("EMF directive %v of %v, want namespace once, dimension Service=api", d, m)
				}
				for _, mm := range d["Metrics"].([]any) {
					mm := mm.(map[string]any)
					if mm["Unit"] != "Count" || m[mm["Name"].(string)] != 1.0 {
						t.Errorf("metric %v of %v, want a count of 1", mm, m)
					}
					counts[mm["Name"].(string)]++
				}
			}
		}
		if counts["reserve_created"] < 5 || counts["reserve_replayed"] != 4 || counts["reserve_key_misuse"] != 3 {
			t.Errorf("metric counts = %v, want >= 5 created, 4 replayed, 3 key misuse", counts)
		}
	})
}

// TestContractV2 runs the core of the contract through HTTP API (payload
// 2.0) events.
func TestContractV2(t *testing.T) {
	s := newStack(t)
	first := s.do(t, request{v2: true, tenant: "acme", keys: []string{"v2-order"}, body: body1001})
	if first.status != http.StatusCreated {
		t.Fatalf("POST = %d %s, want 201", first.status, first.body)
	}
	id := decode(t, first)["id"].(string)
	if first.header.Get("Location") != "/v1/payments/"+id || first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first response headers = %v", first.header)
	}
	s.calls.take()

	again := s.do(t, request{v2: true, tenant: "acme", keys: []string{`"v2-order"`}, body: body1001})
	if again.status != http.StatusCreated || string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" ||
		again.header.Get("Location") != first.header.Get("Location") || again.header.Get("Content-Type") != first.header.Get("Content-Type") {
		t.Errorf("replay = %d %v %s, want the first response replayed", again.status, again.header, again.body)
	}
	if ops, n := s.calls.take(); n != 0 {
		t.Errorf("replay on the warm instance made %d DynamoDB calls (%v), want 0", n, ops)
	}

	// REST and HTTP API events reach the same records.
	if r := s.do(t, request{tenant: "acme", keys: []string{"v2-order"}, body: body1001}); r.status != http.StatusCreated || string(r.body) != string(first.body) {
		t.Errorf("replay through a REST event = %d %s, want %s", r.status, r.body, first.body)
	}
	if r := s.do(t, request{v2: true, tenant: "acme", keys: []string{"v2-order"}, body: `{"amount":1,"currency":"usd","customer":"c"}`}); r.status != http.StatusUnprocessableEntity {
		t.Errorf("different body = %d %s, want 422", r.status, r.body)
	}
	// HTTP API joins repeated headers with commas; the adapter splits them.
	if r := s.do(t, request{v2: true, tenant: "acme", keys: []string{"a", "b"}, body: body1001}); r.status != http.StatusBadRequest || problem(t, r)["code"] != "idempotency_key_invalid" {
		t.Errorf("repeated key = %d %s, want 400 idempotency_key_invalid", r.status, r.body)
	}
	if r := s.do(t, request{v2: true, tenant: "acme", body: body1001}); r.status != http.StatusBadRequest || problem(t, r)["code"] != "idempotency_key_missing" {
		t.Errorf("no key = %d %s, want 400", r.status, r.body)
	}
	if r := s.do(t, request{v2: true, keys: []string{"k"}, body: body1001}); r.status != http.StatusUnauthorized {
		t.Errorf("no tenant = %d %s, want 401", r.status, r.body)
	}
	g := s.do(t, request{v2: true, method: "GET", path: "/v1/payments/" + id, tenant: "acme"})
	if g.status != http.StatusOK || string(g.body) != string(first.body) {
		t.Errorf("GET = %d %s, want 200 %s", g.status, g.body, first.body)
	}
	if r := s.do(t, request{v2: true, method: "GET", path: "/v1/payments/" + id, tenant: "globex"}); r.status != http.StatusNotFound {
		t.Errorf("GET as another tenant = %d, want 404", r.status)
	}
	for _, l := range s.logs.Lines(t) {
		if id, _ := l["request_id"].(string); !strings.HasPrefix(id, "v2-") && !strings.HasPrefix(id, "v1-") {
			t.Errorf("request_id = %q, want API Gateway's", id)
		}
	}
	if n := len(s.payments(t)); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
}
