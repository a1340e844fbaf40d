package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Environment of TestIsolationUnderLoad: `make soak` sets them for a longer
// run.
const (
	envSoakDuration = "ONCE_SOAK_DURATION" // run for this long instead of a fixed count
	envSoakClients  = "ONCE_SOAK_CLIENTS"  // concurrent clients (default isolationClients)
)

// The bounded run of `make test`.
const (
	isolationClients  = 64
	isolationRequests = 20_000
	paymentsPerTenant = 6
)

// isolationTenants are the stack's tenants; each one's payments carry its
// name in their customer and description, and an amount of its own.
var isolationTenants = []struct{ name, key string }{
	{"acme", "sk_test_acme"},
	{"globex", "sk_test_globex"},
	{"initech", "sk_test_initech"},
}

// seeded is a payment a tenant created before the load.
type seeded struct {
	id, customer string
	amount       int64
}

// paymentView is what the isolation checks read of an answer.
type paymentView struct {
	ID          string  `json:"id"`
	Amount      int64   `json:"amount"`
	Customer    string  `json:"customer"`
	Description *string `json:"description"`
	Code        string  `json:"code"`
}

// isolationTally counts what the load saw, by kind of answer.
type isolationTally struct {
	requests                atomic.Int64
	wrongData, serverErrors atomic.Int64
	unexpected, transport   atomic.Int64

	mu       sync.Mutex
	examples []string // the first few failures, for the report
}

func (c *isolationTally) fail(counter *atomic.Int64, format string, args ...any) {
	counter.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.examples) < 10 {
		c.examples = append(c.examples, fmt.Sprintf(format, args...))
	}
}

// spelling returns the i-th spelling of "Bearer <key>": the scheme's case
// and the run of spaces after it vary (3072 spellings), so that requests
// miss API Gateway's authorizer cache (keyed by the header's exact value)
// and the authorizer runs concurrently with the api.
func spelling(key string, i int) string {
	scheme := []byte("bearer")
	for b := range scheme {
		if i&(1<<b) != 0 {
			scheme[b] -= 'a' - 'A'
		}
	}
	return string(scheme) + strings.Repeat(" ", 1+(i>>len(scheme))%48) + key
}

// TestIsolationUnderLoad sends mixed-tenant traffic through the devstack's
// front door: many concurrent clients of three tenants read their own
// payments, try to read another tenant's, and create new ones (three
// tenants at a time with the same Idempotency-Key value), with the
// Authorization header spelled differently from one request to the next and
// another tenant named in headers and the query of every request.
// Every answer must carry the caller's own data (or a 404 for another
// tenant's payment), and none may be a 5xx. Run under -race (make test), it
// also reports any data race on the way through the emulated API Gateway,
// the authorizer and the api function.
//
// ONCE_SOAK_DURATION (and ONCE_SOAK_CLIENTS) turn it into a soak: it then
// runs for that long (make soak).
func TestIsolationUnderLoad(t *testing.T) {
	clients, requests, duration := isolationClients, int64(isolationRequests), time.Duration(0)
	if v := os.Getenv(envSoakDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: not a positive duration", envSoakDuration, v)
		}
		duration, requests = d, 0
	}
	if v := os.Getenv(envSoakClients); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: not a positive number", envSoakClients, v)
		}
		clients = n
	}

	env := testEnv(t)
	var pairs []string
	for _, tn := range isolationTenants {
		pairs = append(pairs, tn.name+":"+tn.key)
	}
	env["ONCE_DEV_API_KEYS"] = strings.Join(pairs, ",")
	env["LOG_LEVEL"] = "error"
	stack := start(t, env, io.Discard)
	base := stack.URL() + "/v1/payments"

	transport := &http.Transport{MaxIdleConns: 2 * clients, MaxIdleConnsPerHost: 2 * clients, IdleConnTimeout: time.Minute}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport, Timeout: time.Minute}

	// Each tenant's own payments.
	own := make([][]seeded, len(isolationTenants))
	for ti, tn := range isolationTenants {
		for i := range paymentsPerTenant {
			p := seeded{customer: fmt.Sprintf("cus_%s_%d", tn.name, i), amount: amountOf(ti, i)}
			r := call(t, "POST", base, tn.key, fmt.Sprintf("seed-%s-%d", tn.name, i), paymentBody(tn.name, p))
			var v paymentView
			if r.status != http.StatusCreated || json.Unmarshal([]byte(r.body), &v) != nil || v.Customer != p.customer {
				t.Fatalf("seed %s #%d = %d %s, want 201 for %s", tn.name, i, r.status, r.body, p.customer)
			}
			p.id = v.ID
			own[ti] = append(own[ti], p)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if duration > 0 {
		ctx, cancel = context.WithTimeout(ctx, duration)
		defer cancel()
	}
	var tally isolationTally
	var next atomic.Int64
	started := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				seq := next.Add(1) - 1
				if requests > 0 && seq >= requests {
					return
				}
				isolationRequest(ctx, client, base, own, int(seq), &tally)
			}
		})
	}
	wg.Wait()
	took := time.Since(started)

	n := tally.requests.Load()
	t.Logf("%d requests from %d clients of %d tenants in %v (%.0f/s): %d wrong data, %d 5xx, %d unexpected, %d transport errors",
		n, clients, len(isolationTenants), took.Round(time.Millisecond), float64(n)/took.Seconds(),
		tally.wrongData.Load(), tally.serverErrors.Load(), tally.unexpected.Load(), tally.transport.Load())
	if bad := tally.wrongData.Load() + tally.serverErrors.Load() + tally.unexpected.Load() + tally.transport.Load(); bad > 0 {
		t.Errorf("%d of %d answers were wrong; first ones:\n%s", bad, n, strings.Join(tally.examples, "\n"))
	}
	if requests > 0 && n != requests {
		t.Errorf("sent %d requests, want %d", n, requests)
	}
}

func amountOf(tenant, i int) int64 { return int64(1000*(tenant+1) + i) }

func paymentBody(tenant string, p seeded) string {
	return fmt.Sprintf(`{"amount": %d, "currency": "EUR", "customer": %q, "description": "order of %s"}`, p.amount, p.customer, tenant)
}

// isolationRequest sends request seq and checks its answer: one in sixteen
// creates a payment, one in eight asks for another tenant's payment, about
// one in four for a path that is no payment (hostile ones included), the
// rest read one of the caller's own.
func isolationRequest(ctx context.Context, client *http.Client, base string, own [][]seeded, seq int, tally *isolationTally) {
	ti := seq % len(isolationTenants)
	tn := isolationTenants[ti]
	mine := own[ti][(seq/len(isolationTenants))%len(own[ti])]
	method, url, body := "GET", base+"/"+mine.id, ""
	want := mine
	status := http.StatusOK
	switch {
	case seq%16 == 3:
		method, url = "POST", base
		want = seeded{customer: fmt.Sprintf("cus_%s_load_%d", tn.name, seq), amount: amountOf(ti, 100+seq%100)}
		body = paymentBody(tn.name, want)
		status = http.StatusCreated
	case seq%8 == 6:
		other := own[(ti+1+seq%2)%len(isolationTenants)][seq%paymentsPerTenant]
		url = base + "/" + other.id
		status = http.StatusNotFound
	case seq%4 == 1:
		// No payment ID at all (the api answers without reading the
		// table), hostile ones among them: their 404s race with the
		// payments the others get.
		url = base + "/" + []string{"%25zz", "%00", "x%0A%7B%22msg%22:%22forged%22%7D", "pay_short"}[(seq/4)%4]
		status = http.StatusNotFound
	}
	// Every request also names another tenant where a client could: in
	// headers and the query. Only the authorizer's context may choose it.
	forged := isolationTenants[(ti+1)%len(isolationTenants)].name
	url += "?tenant=" + forged + "&requestContext.authorizer.tenant=" + forged
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		tally.fail(&tally.transport, "%s %s: %v", method, url, err)
		return
	}
	// One request in four spells its key anew (the authorizer runs), the
	// others reuse one of a few spellings (the cache answers).
	n := seq / len(isolationTenants)
	if n%4 != 0 {
		n %= 8
	}
	req.Header.Set("Authorization", spelling(tn.key, n))
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json")
		// The tenants' creations come in threes (seq 16k+3 is tenant k%3's)
		// that share one key value: each tenant must get its own payment.
		req.Header.Set("Idempotency-Key", fmt.Sprintf("load-%d", seq/48))
	}
	req.Header.Set("Tenant", forged)
	req.Header.Set("X-Tenant", forged)
	req.Header.Add("Authorizer", `{"tenant":"`+forged+`"}`)
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			tally.fail(&tally.transport, "%s %s as %s: %v", method, url, tn.name, err)
		}
		return
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	tally.requests.Add(1)
	if err != nil {
		tally.fail(&tally.transport, "%s %s as %s: read: %v", method, url, tn.name, err)
		return
	}
	var got paymentView
	decodeErr := json.Unmarshal(raw, &got)
	// Whatever the status, an answer holding a payment must hold one of the
	// caller's.
	if decodeErr == nil && got.Customer != "" && !strings.HasPrefix(got.Customer, "cus_"+tn.name+"_") {
		tally.fail(&tally.wrongData, "%s %s as %s = %d with another tenant's payment: %s", method, url, tn.name, resp.StatusCode, raw)
		return
	}
	switch {
	case resp.StatusCode >= 500:
		tally.fail(&tally.serverErrors, "%s %s as %s = %d %s", method, url, tn.name, resp.StatusCode, raw)
	case resp.StatusCode != status || decodeErr != nil:
		tally.fail(&tally.unexpected, "%s %s as %s = %d %s, want %d", method, url, tn.name, resp.StatusCode, raw, status)
	case status == http.StatusNotFound:
		if got.Code != "not_found" {
			tally.fail(&tally.unexpected, "%s %s as %s = 404 %s, want a not_found problem", method, url, tn.name, raw)
		}
	case got.Customer != want.customer || got.Amount != want.amount || (want.id != "" && got.ID != want.id) ||
		got.Description == nil || *got.Description != "order of "+tn.name:
		tally.fail(&tally.wrongData, "%s %s as %s = %d %s, want %s's payment %s (%s, %d)", method, url, tn.name,
			resp.StatusCode, raw, tn.name, want.id, want.customer, want.amount)
	}
}
