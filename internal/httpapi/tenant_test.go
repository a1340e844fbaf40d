package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
)

// TestInvalidTenant: a tenant outside idempotency's rule is refused 403
// tenant_invalid on a POST (by the middleware, nothing stored) and on a
// GET (ServeGet, nothing read), each counted as tenant_invalid (alarmed),
// and the request's log line is at error
// and holds none of the tenant: not a short one (a display name, an
// e-mail address) whole, not a long one's first bytes.
func TestInvalidTenant(t *testing.T) {
	store := memory.New()
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: testTenant, OnError: httpapi.WriteError})
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	logs, emf := &lambdatest.Buffer{}, &lambdatest.Buffer{}
	h := httpapi.NewHandler(httpapi.Deps{
		Routes: []httpapi.Route{
			{Pattern: "POST /v1/things", Handler: mw.Atomic("POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); ok {
					w.WriteHeader(http.StatusCreated)
				}
			}))},
			{Pattern: "GET /v1/things/{id}", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				httpapi.ServeGet(w, r, func(string) bool { return true }, func(context.Context, string, string) (string, error) {
					reads++
					return "thing", nil
				})
			})},
		},
		Tenant:  testTenant,
		Logger:  slog.New(slog.NewJSONHandler(logs, nil)),
		Metrics: metrics.New(emf, "once", map[string]string{"Service": "api"}),
	})
	long := strings.Repeat("a", 3000)
	tenants := []string{"Jane Doe#1", "jane.doe@example.com\n", "acme\u0085", long}
	for _, tenant := range tenants {
		for _, method := range []string{"POST", "GET"} {
			r := httptest.NewRequest(method, "/v1/things", strings.NewReader(`{}`))
			if method == "GET" {
				r = httptest.NewRequest(method, "/v1/things/t1", nil)
			}
			r.Header.Set(tenantHeader, tenant)
			r.Header.Set("Idempotency-Key", "k1")
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if p := problemOf(t, w); w.Code != http.StatusForbidden || p["code"] != "tenant_invalid" {
				t.Errorf("%s with tenant %.20q = %d %v, want 403 tenant_invalid", method, tenant, w.Code, p)
			}
		}
		if _, err := store.Get(t.Context(), idempotency.NewKey(tenant, "k1")); err == nil {
			t.Errorf("tenant %.20q: a record was stored", tenant)
		}
	}
	if reads != 0 {
		t.Errorf("ServeGet read %d times, want 0", reads)
	}
	lines := logs.Lines(t)
	if len(lines) != 2*len(tenants) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), 2*len(tenants), logs)
	}
	for i, l := range lines {
		if l["level"] != "ERROR" || l["tenant"] != "" || !strings.Contains(l["error"].(string), "tenant is invalid") {
			t.Errorf("line %d = %v, want ERROR, no tenant, the error saying why", i, l)
		}
	}
	if diff := cmp.Diff(map[string]int{httpapi.MetricTenantInvalid: 2 * len(tenants)}, lambdatest.Counts(t, emf.String(), "api")); diff != "" {
		t.Errorf("metrics mismatch (-want +got):\n%s", diff)
	}
	for _, tenant := range tenants {
		j, _ := json.Marshal(tenant)
		for _, form := range []string{tenant, string(j[1 : len(j)-1]), strconv.Quote(tenant), tenant[:min(len(tenant), 12)]} {
			if strings.Contains(logs.String(), form) {
				t.Errorf("the logs hold the %d-byte tenant (as %.30q):\n%.2000s", len(tenant), form, logs)
			}
		}
	}
}
