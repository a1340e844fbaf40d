package simulator_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/provider/simulator"
)

var now = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// env is a simulator on fresh tables, served over HTTP.
type env struct {
	db    simulator.TableAPI
	table string
	sim   *simulator.Server
	srv   *httptest.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	e := &env{db: client, table: names.ByLogicalID["ProviderTable"]}
	e.sim = e.newServer()
	e.srv = httptest.NewServer(e.sim)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) newServer() *simulator.Server {
	return simulator.New(simulator.Options{
		DB: e.db, Table: e.table,
		Now:       func() time.Time { return now },
		SlowDelay: 200 * time.Millisecond,
		HoldFor:   400 * time.Millisecond,
	})
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d %q is not JSON: %v", a.status, a.body, err)
	}
	return m
}

func do(t *testing.T, hc *http.Client, req *http.Request) answer {
	t.Helper()
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return answer{resp.StatusCode, resp.Header, body}
}

func (e *env) post(t *testing.T, key string, body any) answer {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	return e.postTo(t, "/v1/charges", key, raw)
}

// postTo sends POST path with body under key (none when empty).
func (e *env) postTo(t *testing.T, path, key string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return do(t, nil, req)
}

func (e *env) get(t *testing.T, path string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, nil, req)
}

// count asks the test endpoint, as checks in other processes do.
func (e *env) count(t *testing.T, key string) int {
	t.Helper()
	a := e.get(t, "/v1/_test/charges?idempotency_key="+url.QueryEscape(key))
	if a.status != http.StatusOK {
		t.Fatalf("GET /v1/_test/charges = %d %s, want 200", a.status, a.body)
	}
	var c struct{ Count int }
	if err := json.Unmarshal(a.body, &c); err != nil {
		t.Fatal(err)
	}
	n, err := e.sim.Count(t.Context(), key)
	if err != nil || n != c.Count {
		t.Fatalf("Count(%q) = %d, %v; want %d (the HTTP count)", key, n, err, c.Count)
	}
	return c.Count
}

func request(source string) map[string]any {
	return map[string]any{
		"amount": 1999, "currency": "USD", "source": source, "customer": "cus_1",
		"description": "order 7", "metadata": map[string]string{"order": "7"},
	}
}

func TestChargeByToken(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		source     string
		wantStatus int
		want       map[string]any // compared after dropping "id" and error.charge
		wantCount  int
		minTime    time.Duration
	}{
		{
			source: simulator.TokenVisa, wantStatus: 201, wantCount: 1,
			want: map[string]any{
				"object": "charge", "status": "succeeded", "amount": 1999.0, "currency": "usd",
				"source": "tok_visa", "customer": "cus_1", "description": "order 7",
				"metadata": map[string]any{"order": "7"}, "created": float64(now.Unix()),
				"idempotency_key": "k-tok_visa",
			},
		},
		{
			source: simulator.TokenDeclined, wantStatus: 402, wantCount: 1,
			want: map[string]any{"error": map[string]any{
				"type": "card_error", "code": "card_declined", "decline_code": "generic_decline",
				"message": "Your card was declined.",
			}},
		},
		{
			source: simulator.TokenUnavailable, wantStatus: 503, wantCount: 0,
			want: map[string]any{"error": map[string]any{
				"type": "api_error", "code": "provider_unavailable",
				"message": "The provider is unavailable; nothing was charged. Retry later.",
			}},
		},
		{
			source: simulator.TokenSlow, wantStatus: 201, wantCount: 1, minTime: 200 * time.Millisecond,
			want: map[string]any{
				"object": "charge", "status": "succeeded", "amount": 1999.0, "currency": "usd",
				"source": "tok_slow", "customer": "cus_1", "description": "order 7",
				"metadata": map[string]any{"order": "7"}, "created": float64(now.Unix()),
				"idempotency_key": "k-tok_slow",
			},
		},
		{
			source: simulator.TokenTimeout, wantStatus: 201, wantCount: 1, minTime: 400 * time.Millisecond,
			want: map[string]any{
				"object": "charge", "status": "succeeded", "amount": 1999.0, "currency": "usd",
				"source": "tok_timeout", "customer": "cus_1", "description": "order 7",
				"metadata": map[string]any{"order": "7"}, "created": float64(now.Unix()),
				"idempotency_key": "k-tok_timeout",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			key := "k-" + tt.source
			start := time.Now()
			a := e.post(t, key, request(tt.source))
			if took := time.Since(start); took < tt.minTime {
				t.Errorf("POST took %v, want at least %v", took, tt.minTime)
			}
			if a.status != tt.wantStatus {
				t.Fatalf("POST status = %d %s, want %d", a.status, a.body, tt.wantStatus)
			}
			if got := a.header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", got)
			}
			if got := a.header.Get(simulator.ReplayedHeader); got != "" {
				t.Errorf("%s = %q on a first request, want none", simulator.ReplayedHeader, got)
			}
			got := a.json(t)
			var id string
			if s, ok := got["id"].(string); ok {
				id = s
				delete(got, "id")
			}
			if e, ok := got["error"].(map[string]any); ok {
				if s, ok := e["charge"].(string); ok {
					id = s
					delete(e, "charge")
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("POST body mismatch (-want +got):\n%s", diff)
			}
			if n := e.count(t, key); n != tt.wantCount {
				t.Errorf("count = %d, want %d", n, tt.wantCount)
			}
			if tt.wantCount == 0 {
				if id != "" {
					t.Errorf("answer names charge %q, want none", id)
				}
				return
			}
			if !strings.HasPrefix(id, "prch_") {
				t.Fatalf("charge id = %q, want prch_...", id)
			}
			// The charge is found by key and by id, in the same form.
			byKey := e.get(t, "/v1/charges?idempotency_key="+key)
			byID := e.get(t, "/v1/charges/"+id)
			if byKey.status != 200 || byID.status != 200 {
				t.Fatalf("lookups = %d, %d, want 200, 200", byKey.status, byID.status)
			}
			if !bytes.Equal(byKey.body, byID.body) {
				t.Errorf("lookup by key = %s, by id = %s, want the same", byKey.body, byID.body)
			}
			found := byKey.json(t)
			if found["id"] != id {
				t.Errorf("lookup id = %v, want %s", found["id"], id)
			}
			wantStatus := "succeeded"
			if tt.wantStatus == 402 {
				wantStatus = "failed"
				if found["failure_code"] != "card_declined" {
					t.Errorf("lookup failure_code = %v, want card_declined", found["failure_code"])
				}
			}
			if found["status"] != wantStatus {
				t.Errorf("lookup status = %v, want %s", found["status"], wantStatus)
			}
		})
	}
}

func TestInvalidRequests(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, key string
		body      any
		wantParam string
	}{
		{"no key", "", request("tok_visa"), "Idempotency-Key"},
		{"reserved key", "id#prch_1", request("tok_visa"), "Idempotency-Key"},
		{"key with a space", "a b", request("tok_visa"), "Idempotency-Key"},
		{"key too long", strings.Repeat("k", 256), request("tok_visa"), "Idempotency-Key"},
		{"unknown token", "k1", request("tok_mastercard"), "source"},
		{"no source", "k2", map[string]any{"amount": 5, "currency": "usd", "customer": "c"}, "source"},
		{"zero amount", "k3", map[string]any{"amount": 0, "currency": "usd", "source": "tok_visa", "customer": "c"}, "amount"},
		{"fractional amount", "k4", `{"amount": 1.5, "currency": "usd", "source": "tok_visa", "customer": "c"}`, "amount"},
		{"metadata not strings", "k4b", `{"amount": 5, "currency": "usd", "source": "tok_visa", "customer": "c", "metadata": {"n": 1}}`, "metadata"},
		{"bad currency", "k5", map[string]any{"amount": 5, "currency": "dollars", "source": "tok_visa", "customer": "c"}, "currency"},
		{"no customer", "k6", map[string]any{"amount": 5, "currency": "usd", "source": "tok_visa"}, "customer"},
		{"unknown field", "k7", `{"amount": 5, "currency": "usd", "source": "tok_visa", "customer": "c", "capture": true}`, ""},
		{"two values", "k8", `{"amount": 5, "currency": "usd", "source": "tok_visa", "customer": "c"} {}`, ""},
		{"not JSON", "k9", `amount=5`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := e.post(t, tt.key, tt.body)
			if a.status != http.StatusBadRequest {
				t.Fatalf("POST = %d %s, want 400", a.status, a.body)
			}
			got := a.json(t)["error"].(map[string]any)
			if got["code"] != "invalid_request" || got["type"] != "invalid_request_error" {
				t.Errorf("error = %v, want invalid_request_error/invalid_request", got)
			}
			if p, _ := got["param"].(string); p != tt.wantParam {
				t.Errorf("param = %q, want %q", p, tt.wantParam)
			}
			if tt.wantParam != "Idempotency-Key" {
				if n := e.count(t, tt.key); n != 0 {
					t.Errorf("count = %d after a 400, want 0", n)
				}
			}
		})
	}
	// A corrected request with the same key is charged: a 400 records nothing.
	if a := e.post(t, "k1", request("tok_visa")); a.status != 201 {
		t.Errorf("corrected POST = %d %s, want 201", a.status, a.body)
	}
}

// TestLimits: lengths count characters, not bytes, up to the API's limits
// (internal/payments): at the limit a request is charged, one character more
// is a 400.
func TestLimits(t *testing.T) {
	e := newEnv(t)
	metadata := func(pairs, keyLen, valueLen int, char string) map[string]string {
		m := map[string]string{}
		for i := range pairs {
			m[fmt.Sprintf("%02d", i)+strings.Repeat(char, keyLen-2)] = strings.Repeat(char, valueLen)
		}
		return m
	}
	tests := []struct {
		name      string
		field     string
		value     any
		wantParam string // "" for a 201
	}{
		{"customer of 255 characters", "customer", strings.Repeat("é", 255), ""},
		{"customer of 256 characters", "customer", strings.Repeat("é", 256), "customer"},
		{"customer of 255 four-byte characters", "customer", strings.Repeat("😀", 255), ""},
		{"description of 1000 characters", "description", strings.Repeat("€", 1000), ""},
		{"description of 1001 characters", "description", strings.Repeat("€", 1001), "description"},
		{"20 metadata pairs of 40 and 500 characters", "metadata", metadata(20, 40, 500, "ü"), ""},
		{"21 metadata pairs", "metadata", metadata(21, 2, 1, "ü"), "metadata"},
		{"metadata key of 41 characters", "metadata", metadata(1, 41, 1, "ü"), "metadata"},
		{"metadata value of 501 characters", "metadata", metadata(1, 2, 501, "ü"), "metadata"},
		{"empty metadata key", "metadata", map[string]string{"": "v"}, "metadata"},
		{"amount 99999999", "amount", 99_999_999, ""},
		{"amount 100000000", "amount", 100_000_000, "amount"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := request(simulator.TokenVisa)
			body[tt.field] = tt.value
			key := fmt.Sprintf("limits-%d", i)
			a := e.post(t, key, body)
			if tt.wantParam == "" {
				if a.status != http.StatusCreated {
					t.Fatalf("POST = %d %s, want 201", a.status, a.body)
				}
				if got := a.json(t)[tt.field]; !cmp.Equal(got, mustJSON(t, tt.value)) {
					t.Errorf("charge %s = %v, want %v", tt.field, got, tt.value)
				}
				return
			}
			if a.status != http.StatusBadRequest {
				t.Fatalf("POST = %d %s, want 400", a.status, a.body)
			}
			if p := a.json(t)["error"].(map[string]any)["param"]; p != tt.wantParam {
				t.Errorf("param = %v, want %s", p, tt.wantParam)
			}
			if n := e.count(t, key); n != 0 {
				t.Errorf("count = %d after a 400, want 0", n)
			}
		})
	}
}

// mustJSON is v as encoding/json decodes it into an any.
func mustJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReplay(t *testing.T) {
	e := newEnv(t)
	for _, source := range []string{simulator.TokenVisa, simulator.TokenDeclined, simulator.TokenTimeout, simulator.TokenSlow} {
		t.Run(source, func(t *testing.T) {
			key := "replay-" + source
			first := e.post(t, key, request(source))
			again := e.post(t, key, request(source))
			if again.status != first.status || !bytes.Equal(again.body, first.body) {
				t.Errorf("replay = %d %s, want %d %s", again.status, again.body, first.status, first.body)
			}
			if got := again.header.Get(simulator.ReplayedHeader); got != "true" {
				t.Errorf("replay %s = %q, want true", simulator.ReplayedHeader, got)
			}
			// Key order in the body and the currency's case do not matter.
			same := `{"metadata": {"order": "7"}, "source": "` + source +
				`", "customer": "cus_1", "description": "order 7", "currency": "usd", "amount": 1999}`
			if a := e.post(t, key, same); a.status != first.status || !bytes.Equal(a.body, first.body) {
				t.Errorf("replay of an equivalent body = %d %s, want %d %s", a.status, a.body, first.status, first.body)
			}
			changed := request(source)
			changed["amount"] = 2000
			reused := e.post(t, key, changed)
			if reused.status != http.StatusUnprocessableEntity {
				t.Fatalf("POST with other parameters = %d %s, want 422", reused.status, reused.body)
			}
			if code := reused.json(t)["error"].(map[string]any)["code"]; code != "idempotency_key_reused" {
				t.Errorf("code = %v, want idempotency_key_reused", code)
			}
			if n := e.count(t, key); n != 1 {
				t.Errorf("count = %d, want 1", n)
			}
		})
	}
	t.Run("a held charge replays at once", func(t *testing.T) {
		// The first request gives up on its held answer; the retry gets
		// the recorded charge without being held.
		sim := simulator.New(simulator.Options{DB: e.db, Table: e.table, HoldFor: time.Minute})
		srv := httptest.NewServer(sim)
		defer srv.Close()
		body, _ := json.Marshal(request(simulator.TokenTimeout))
		send := func(timeout time.Duration) (*http.Response, error) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/charges", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Idempotency-Key", "replay-held")
			return (&http.Client{Timeout: timeout}).Do(req)
		}
		if resp, err := send(200 * time.Millisecond); err == nil {
			resp.Body.Close()
			t.Fatalf("POST tok_timeout answered %d at once, want it held", resp.StatusCode)
		}
		// On a loaded machine the client may give up before the charge is
		// recorded (the write goes on): wait for it.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if n, err := sim.Count(t.Context(), "replay-held"); err == nil && n == 1 {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("Count = %d, %v, want 1", n, err)
			}
		}
		resp, err := send(20 * time.Second)
		if err != nil {
			t.Fatalf("retry: %v, want the replay well within the minute's hold", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 || resp.Header.Get(simulator.ReplayedHeader) != "true" {
			t.Errorf("retry = %d (replayed %q), want 201 (replayed true)", resp.StatusCode, resp.Header.Get(simulator.ReplayedHeader))
		}
	})
	t.Run("unavailable after a charge", func(t *testing.T) {
		// A key that was charged is never answered "not charged".
		key := "replay-then-unavailable"
		if a := e.post(t, key, request(simulator.TokenVisa)); a.status != 201 {
			t.Fatalf("POST = %d %s, want 201", a.status, a.body)
		}
		if a := e.post(t, key, request(simulator.TokenUnavailable)); a.status != http.StatusUnprocessableEntity {
			t.Errorf("POST tok_unavailable with a charged key = %d %s, want 422", a.status, a.body)
		}
	})
}

func TestConcurrentSameKey(t *testing.T) {
	e := newEnv(t)
	const n = 20
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = e.post(t, "concurrent", request(simulator.TokenVisa)) })
	}
	wg.Wait()
	fresh := 0
	for i, a := range answers {
		if a.status != 201 || !bytes.Equal(a.body, answers[0].body) {
			t.Errorf("answer %d = %d %s, want 201 %s", i, a.status, a.body, answers[0].body)
		}
		if a.header.Get(simulator.ReplayedHeader) == "" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d answers were not replays, want 1", fresh)
	}
	if got := e.count(t, "concurrent"); got != 1 {
		t.Errorf("count = %d, want 1", got)
	}
}

func TestRestart(t *testing.T) {
	e := newEnv(t)
	first := e.post(t, "restart", request(simulator.TokenDeclined))
	e.srv.Close()

	// A new server on the same table: the state is DynamoDB's.
	e.sim = e.newServer()
	e.srv = httptest.NewServer(e.sim)
	t.Cleanup(e.srv.Close)
	again := e.post(t, "restart", request(simulator.TokenDeclined))
	if again.status != 402 || !bytes.Equal(again.body, first.body) || again.header.Get(simulator.ReplayedHeader) != "true" {
		t.Errorf("after a restart: %d %s (replayed %q), want 402 %s (replayed true)",
			again.status, again.body, again.header.Get(simulator.ReplayedHeader), first.body)
	}
	if n := e.count(t, "restart"); n != 1 {
		t.Errorf("count = %d, want 1", n)
	}
}

func TestLookupMissing(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{"/v1/charges?idempotency_key=nothing", "/v1/charges/prch_000000000000000000000000"} {
		a := e.get(t, path)
		if a.status != http.StatusNotFound {
			t.Fatalf("GET %s = %d %s, want 404", path, a.status, a.body)
		}
		if code := a.json(t)["error"].(map[string]any)["code"]; code != "resource_missing" {
			t.Errorf("GET %s code = %v, want resource_missing", path, code)
		}
	}
	if n := e.count(t, "nothing"); n != 0 {
		t.Errorf("count = %d, want 0", n)
	}
	for _, path := range []string{"/v1/charges", "/v1/_test/charges"} {
		if a := e.get(t, path); a.status != http.StatusBadRequest {
			t.Errorf("GET %s without a key = %d %s, want 400", path, a.status, a.body)
		}
	}
}

// TestHoldReleased: a held answer is given up when the client goes away, so
// the handler returns (httptest.Server.Close waits for it).
func TestHoldReleased(t *testing.T) {
	e := newEnv(t)
	sim := simulator.New(simulator.Options{DB: e.db, Table: e.table, HoldFor: time.Minute})
	srv := httptest.NewServer(sim)
	body, _ := json.Marshal(request(simulator.TokenTimeout))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "held")
	hc := &http.Client{Timeout: 200 * time.Millisecond}
	if resp, err := hc.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("POST tok_timeout answered %d within 200ms, want a timeout", resp.StatusCode)
	}
	start := time.Now()
	srv.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the held request took %v to end after the client left, want it at once", took)
	}
	// The charge was recorded before the hold.
	if n, err := sim.Count(t.Context(), "held"); err != nil || n != 1 {
		t.Errorf("Count = %d, %v, want 1", n, err)
	}
}

// TestFlaky checks tok_flaky: 503 with nothing charged for FlakyFor after
// the first request with the key, then one charge, replayed after.
func TestFlaky(t *testing.T) {
	e := newEnv(t)
	clock := now
	var mu sync.Mutex
	sim := simulator.New(simulator.Options{
		DB: e.db, Table: e.table, FlakyFor: 10 * time.Second,
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
	})
	e = &env{db: e.db, table: e.table, sim: sim, srv: httptest.NewServer(sim)}
	t.Cleanup(e.srv.Close)
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	for _, step := range []struct {
		after      time.Duration
		wantStatus int
		wantCount  int
		replayed   bool
	}{
		{0, http.StatusServiceUnavailable, 0, false},
		{9 * time.Second, http.StatusServiceUnavailable, 0, false},
		{time.Second, http.StatusCreated, 1, false},
		{time.Hour, http.StatusCreated, 1, true},
	} {
		advance(step.after)
		a := e.post(t, "k-flaky", request(simulator.TokenFlaky))
		if a.status != step.wantStatus || (a.header.Get("Idempotent-Replayed") == "true") != step.replayed {
			t.Errorf("after %v: %d (replayed %q) %s, want %d (replayed %v)", step.after, a.status, a.header.Get("Idempotent-Replayed"), a.body, step.wantStatus, step.replayed)
		}
		if a.status == http.StatusServiceUnavailable && a.json(t)["error"].(map[string]any)["code"] != "provider_unavailable" {
			t.Errorf("503 body %s, want code provider_unavailable", a.body)
		}
		if n := e.count(t, "k-flaky"); n != step.wantCount {
			t.Errorf("after %v: charges = %d, want %d", step.after, n, step.wantCount)
		}
	}
	// Another key has its own outage.
	if a := e.post(t, "k-flaky-2", request(simulator.TokenFlaky)); a.status != http.StatusServiceUnavailable {
		t.Errorf("another key: %d, want 503", a.status)
	}
	if a := e.post(t, "flaky#k", request(simulator.TokenVisa)); a.status != http.StatusBadRequest {
		t.Errorf("a key in the markers' namespace: %d, want 400", a.status)
	}
}
