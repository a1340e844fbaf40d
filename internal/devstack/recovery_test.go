package devstack_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/payments"
)

// startRecovery starts a devstack with crash injection on and a short lease
// and provider timeout, so that recovery takes seconds. It returns the stack,
// its output, and the idempotency store on its table.
func startRecovery(t *testing.T) (*devstack.Stack, *lambdatest.Buffer, *dynamo.Store) {
	t.Helper()
	env := recoveryEnv(t)
	out := &lambdatest.Buffer{}
	stack := start(t, env, out)
	return stack, out, dynamo.New(dynamotest.Client(t), stack.Config().Table("IdempotencyTable"))
}

// recoveryEnv is testEnv with fault injection on and a 2s lease, a 1s
// provider timeout and settle, so that recovery takes seconds, logging at
// info (the metrics the tests count).
func recoveryEnv(t *testing.T) map[string]string {
	t.Helper()
	env := testEnv(t)
	env["ONCE_FAULT_INJECTION"] = "1"
	env["ONCE_LEASE"] = "2s"
	env["ONCE_PROVIDER_TIMEOUT"] = "1s"
	env["ONCE_PROVIDER_SETTLE"] = "1s"
	env["LOG_LEVEL"] = "info"
	return env
}

// send posts body to path with the key and, when fault is set, a Once-Fault
// header.
func send(t *testing.T, base, path, key, fault, body string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_test_acme")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	if fault != "" {
		req.Header.Set("Once-Fault", fault)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// forwardKey is the key the api sends the provider for the charge body
// under key.
func forwardKey(t *testing.T, key idempotency.Key, body string) string {
	t.Helper()
	fp, err := idempotency.RequestFingerprint(http.MethodPost, "POST /v1/charges", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return key.Forward(fp)
}

// charges returns how many charges the provider simulator made under key.
func charges(t *testing.T, stack *devstack.Stack, key string) int {
	t.Helper()
	resp, err := stack.ProviderClient().Get(stack.Config().ProviderURL + "/v1/_test/charges?idempotency_key=" + url.QueryEscape(key))
	if err != nil {
		t.Fatalf("count charges: %v", err)
	}
	defer resp.Body.Close()
	var out struct{ Count int }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("count charges: %d, %v", resp.StatusCode, err)
	}
	return out.Count
}

// settled reports whether r is an answer a retry can end on: anything but
// "in progress" (409), a crash (API Gateway's 502 function_failed) and an unknown outcome
// (504).
func settled(r response) bool {
	switch r.status {
	case http.StatusConflict, http.StatusBadGateway, http.StatusGatewayTimeout:
		return false
	}
	return true
}

// retryUntilSettled retries the request as a client would, honouring
// Retry-After up to a second, until the answer is settled.
func retryUntilSettled(t *testing.T, base, path, key, body string, within time.Duration) response {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := send(t, base, path, key, "", body)
		if settled(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no settled answer within %v; last %d %s", within, r.status, r.body)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// settledAs is the answer a request settles on: its status, its problem
// code ("" for none), and whether it is stored (replayed byte for byte).
type settledAs struct {
	status int
	code   string
	stored bool
}

// crashAndSettle sends body to path under key with the Once-Fault header
// fault, checks that it crashed when crashes says so, then retries as a
// client would until the answer is settled, and checks that it is want and
// that every later retry gets it again.
func crashAndSettle(t *testing.T, base, path, key, fault, body string, crashes bool, want settledAs) {
	t.Helper()
	first := send(t, base, path, key, fault, body)
	if crashes {
		// A crash is a function error: API Gateway's DEFAULT_5XX, as
		// template.yaml declares it.
		wantProblem(t, first, http.StatusBadGateway, "function_failed")
	}
	if !crashes && first.status == http.StatusBadGateway {
		t.Errorf("first answer with Once-Fault: %q = %d %s, want no crash", fault, first.status, first.body)
	}
	got := retryUntilSettled(t, base, path, key, body, 45*time.Second)
	if got.status != want.status {
		t.Fatalf("settled answer = %d %s, want %d", got.status, got.body, want.status)
	}
	if want.code != "" && !strings.Contains(got.body, `"code":"`+want.code+`"`) {
		t.Errorf("settled answer %s, want code %s", got.body, want.code)
	}
	// Every later retry gets the same answer; a stored one is replayed byte
	// for byte.
	for i := range 3 {
		again := send(t, base, path, key, "", body)
		if again.status != got.status {
			t.Fatalf("retry %d = %d %s, want %d", i, again.status, again.body, got.status)
		}
		if want.stored && (again.body != got.body || again.header.Get("Idempotent-Replayed") != "true") {
			t.Errorf("retry %d = %s (replayed %q), want the replay of %s", i, again.body, again.header.Get("Idempotent-Replayed"), got.body)
		}
	}
}

// TestRecoveryMatrix crashes or confuses a charge at every fault point with
// every source token, then retries as a client would, with the sweeper,
// reconciler and worker running from the streams as in AWS. Whatever
// happened, the provider charged at most once (exactly once when the client
// was told it succeeded), the key ends in a final state, and every later
// retry gets the same answer.
func TestRecoveryMatrix(t *testing.T) {
	stack, out, store := startRecovery(t)

	type final struct {
		status  int
		code    string // problem code, for errors
		charged int    // charges at the provider
		record  string // idempotency record status, "" when absent
	}
	outcomes := map[string]final{
		"tok_visa":           {status: http.StatusCreated, charged: 1, record: string(idempotency.StatusCompleted)},
		"tok_chargeDeclined": {status: http.StatusPaymentRequired, code: "card_declined", charged: 1, record: string(idempotency.StatusCompleted)},
		"tok_unavailable":    {status: http.StatusServiceUnavailable, code: "provider_unavailable", charged: 0},
		// The provider holds its answer past ONCE_PROVIDER_TIMEOUT (tok_timeout)
		// or answers after it (tok_slow, 3s): the api answers 504, and the
		// reconciler finds the charge.
		"tok_timeout": {status: http.StatusCreated, charged: 1, record: string(idempotency.StatusCompleted)},
		"tok_slow":    {status: http.StatusCreated, charged: 1, record: string(idempotency.StatusCompleted)},
	}
	faults := []string{"", "after-reserve", "after-provider-call", "after-complete"}
	run := fmt.Sprint(time.Now().UnixNano())
	for token, want := range outcomes {
		for _, fault := range faults {
			name := token + "/" + fault
			if fault == "" {
				name = token + "/no-fault"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				key := fmt.Sprintf("matrix-%s-%s-%s", run, token, fault)
				body := fmt.Sprintf(`{"amount": 1500, "currency": "USD", "customer": "cus_42", "source": %q}`, token)
				// after-complete is reached only when a response is stored:
				// not for 503 (released) nor 504 (left UNKNOWN).
				crashes := fault != "" && (fault != "after-complete" || (token != "tok_unavailable" && token != "tok_timeout" && token != "tok_slow"))
				crashAndSettle(t, stack.URL(), "/v1/charges", key, fault, body, crashes, settledAs{want.status, want.code, want.record != ""})

				k := idempotency.NewKey("acme", key)
				if n := charges(t, stack, forwardKey(t, k, body)); n != want.charged {
					t.Errorf("provider charges for the key = %d, want %d", n, want.charged)
				}
				rec, err := store.Get(t.Context(), k)
				switch {
				case want.record == "" && !errors.Is(err, idempotency.ErrNotFound):
					t.Errorf("record = %+v, %v; want none (released)", rec.Status, err)
				case want.record != "" && err != nil:
					t.Errorf("record: %v, want %s", err, want.record)
				case want.record != "" && string(rec.Status) != want.record:
					t.Errorf("record status = %s, want %s", rec.Status, want.record)
				}
			})
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack output:\n%s", out.String())
		}
	})
}

// TestRecoveryWithoutTTL crashes a charge after the provider charged and
// never retries, on tables without TTL, so that nothing is deleted by
// itself, as on AWS, where TTL takes up to days: the sweeper schedules the
// reservation's check, the checker finds its lease run out and hands it to
// the reconciler (UNKNOWN), which completes it from the provider's record,
// within the lease plus 60 seconds. The first retry afterwards replays the
// charge's 201.
func TestRecoveryWithoutTTL(t *testing.T) {
	env := recoveryEnv(t)
	env["ONCE_DEV_TTL"] = "off"
	out := &lambdatest.Buffer{}
	stack := start(t, env, out)
	cfg := stack.Config()
	db := dynamotest.Client(t)
	store := dynamo.New(db, cfg.Table("IdempotencyTable"))
	for _, table := range []string{cfg.Table("IdempotencyTable"), cfg.Table("PaymentsTable")} {
		ttl, err := db.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatal(err)
		}
		if s := ttl.TimeToLiveDescription.TimeToLiveStatus; s != types.TimeToLiveStatusDisabled {
			t.Fatalf("%s TTL = %s, want DISABLED", table, s)
		}
	}
	key := fmt.Sprintf("no-ttl-%d", time.Now().UnixNano())
	body := `{"amount": 4200, "currency": "EUR", "customer": "cus_7", "source": "tok_visa"}`
	if r := send(t, stack.URL(), "/v1/charges", key, "after-provider-call", body); r.status != http.StatusBadGateway {
		t.Fatalf("crash = %d %s, want 502", r.status, r.body)
	}
	crashed := time.Now()
	k := idempotency.NewKey("acme", key)
	reserved, err := store.Get(t.Context(), k)
	if err != nil || reserved.Status != idempotency.StatusInProgress {
		t.Fatalf("after the crash: %s, %v; want the reservation IN_PROGRESS", reserved.Status, err)
	}
	lease := reserved.ExpiresAt.Sub(reserved.CreatedAt)
	var rec idempotency.Record
	for deadline := reserved.ExpiresAt.Add(60 * time.Second); ; {
		rec, err = store.Get(t.Context(), k)
		if err == nil && rec.Status == idempotency.StatusCompleted {
			break
		}
		if err == nil && rec.Status == idempotency.StatusInProgress && rec.LeaseToken != reserved.LeaseToken {
			t.Fatalf("the reservation was taken over: %+v", rec)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no COMPLETED record within the lease (%v) + 60s without TTL: %s, %v\n%s", lease, rec.Status, err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(crashed)
	t.Logf("recovered without TTL and without a retry %v after the crash (lease %v)", took.Round(10*time.Millisecond), lease)
	if took < lease-time.Second {
		t.Errorf("recovered %v after the crash, before the lease (%v) ran out", took, lease)
	}
	r := send(t, stack.URL(), "/v1/charges", key, "", body)
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("first retry after recovery = %d %s (replayed %q), want the stored 201", r.status, r.body, r.header.Get("Idempotent-Replayed"))
	}
	if string(rec.Response.Body) != r.body {
		t.Errorf("retry body %s, want the recorded %s", r.body, rec.Response.Body)
	}
	if n := charges(t, stack, forwardKey(t, k, body)); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
	// The move to UNKNOWN arms a check too (the sweeper's own poller reads
	// it, maybe after the reconciler has completed the record): wait for it.
	metrics := lambdatest.CountsAmong(out.String())
	for deadline := time.Now().Add(10 * time.Second); metrics["check_scheduled"] < 2 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		metrics = lambdatest.CountsAmong(out.String())
	}
	// Two arms: the reservation's and the move to UNKNOWN's. A stream record
	// delivered again sends its check again (a documented double count), so
	// more is allowed, up to each of the two delivered twice; fewer than two
	// is an arm missing.
	if n := metrics["check_scheduled"]; n < 2 || n > 4 {
		t.Errorf("check_scheduled = %d, want 2 (the reservation's and the UNKNOWN record's), up to 4 with redeliveries", n)
	}
	for name, want := range map[string]int{"reservation_abandoned": 1, "reconcile_scheduled": 1, "reconcile_resolved": 1, "zombie_swept": 0} {
		if metrics[name] != want {
			t.Errorf("%s = %d, want %d", name, metrics[name], want)
		}
	}
}

// TestWorkerThroughStream creates payments and waits for the worker, run from
// the payments stream, to settle them.
func TestWorkerThroughStream(t *testing.T) {
	env := testEnv(t)
	var out lambdatest.Buffer
	stack := start(t, env, &out)
	for source, want := range map[string]payments.Status{"tok_visa": payments.StatusSucceeded, "tok_chargeDeclined": payments.StatusFailed} {
		t.Run(source, func(t *testing.T) {
			body := fmt.Sprintf(`{"amount": 990, "currency": "EUR", "customer": "cus_1", "source": %q}`, source)
			created := send(t, stack.URL(), "/v1/payments", "worker-"+source, "", body)
			if created.status != http.StatusCreated {
				t.Fatalf("create = %d %s", created.status, created.body)
			}
			var p struct{ ID string }
			if err := json.Unmarshal([]byte(created.body), &p); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				r := call(t, "GET", stack.URL()+"/v1/payments/"+p.ID, "sk_test_acme", "", "")
				var got struct{ Status payments.Status }
				_ = json.Unmarshal([]byte(r.body), &got)
				if got.Status == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("payment %s = %d %s after 20s, want status %s", p.ID, r.status, r.body, want)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
	metrics := lambdatest.CountsAmong(out.String())
	if metrics["worker_charged"] != 1 || metrics["worker_failed"] != 1 {
		t.Errorf("worker metrics = charged %d, failed %d; want 1 and 1", metrics["worker_charged"], metrics["worker_failed"])
	}
}

// TestWorkerKeepsFlowing puts three payments whose provider answers 503 and
// one good payment behind them on the payments table's stream (one shard):
// the bad ones go to the retry queue instead of being retried in place, so
// the good one settles at once; a payment whose provider comes back is
// charged once on a retry; and the bad ones end failed with failure_code
// provider_unavailable when their retry window closes.
func TestWorkerKeepsFlowing(t *testing.T) {
	env := testEnv(t)
	env["ONCE_WORKER_RETRY_WINDOW"] = "6s"
	env["ONCE_PROVIDER_TIMEOUT"] = "1s"
	env["ONCE_PROVIDER_SETTLE"] = "1s"
	env["LOG_LEVEL"] = "info"
	out := &lambdatest.Buffer{}
	stack := start(t, env, out)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack output:\n%s", out.String())
		}
	})
	create := func(t *testing.T, source string, n int) string {
		t.Helper()
		body := fmt.Sprintf(`{"amount": 990, "currency": "EUR", "customer": "cus_1", "source": %q}`, source)
		r := send(t, stack.URL(), "/v1/payments", fmt.Sprintf("flow-%s-%d", source, n), "", body)
		if r.status != http.StatusCreated {
			t.Fatalf("create = %d %s", r.status, r.body)
		}
		var p struct{ ID string }
		if err := json.Unmarshal([]byte(r.body), &p); err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	type payment struct {
		Status           string
		FailureCode      string `json:"failure_code"`
		ProviderChargeID string `json:"provider_charge_id"`
	}
	get := func(t *testing.T, id string) payment {
		t.Helper()
		r := call(t, "GET", stack.URL()+"/v1/payments/"+id, "sk_test_acme", "", "")
		var p payment
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || r.status != http.StatusOK {
			t.Fatalf("GET %s = %d %s", id, r.status, r.body)
		}
		return p
	}
	var bad []string
	for i := range 3 {
		bad = append(bad, create(t, "tok_unavailable", i))
	}
	flaky := create(t, "tok_flaky", 0)
	good := create(t, "tok_visa", 0)
	created := time.Now()
	for {
		if p := get(t, good); p.Status == "succeeded" {
			break
		}
		if time.Since(created) > 5*time.Second {
			t.Fatalf("the good payment behind three failing ones is not settled 5s after its creation")
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(created)
	t.Logf("good payment settled %v after its creation, behind 3 payments whose provider answers 503 and one whose provider is down for 3s", took.Round(time.Millisecond))

	shards, err := dynamotest.Streams(t).DescribeStream(t.Context(), &dynamodbstreams.DescribeStreamInput{StreamArn: streamARN(t, stack.Config().Table("PaymentsTable"))})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(shards.StreamDescription.Shards); n != 1 {
		t.Errorf("payments stream shards = %d, want one: the claim is about payments on the same shard", n)
	}

	lambdatest.WaitFor(t, 30*time.Second, "the flaky payment to succeed on a retry", func() bool { return get(t, flaky).Status == "succeeded" })
	lambdatest.WaitFor(t, 30*time.Second, "the failing payments to end failed", func() bool {
		for _, id := range bad {
			if get(t, id).Status == "pending" {
				return false
			}
		}
		return true
	})
	for _, id := range bad {
		if p := get(t, id); p.Status != "failed" || p.FailureCode != "provider_unavailable" || p.ProviderChargeID != "" {
			t.Errorf("payment %s = %+v, want failed, provider_unavailable, no charge", id, p)
		}
	}
	metrics := lambdatest.CountsAmong(out.String())
	if metrics["worker_charged"] != 2 || metrics["worker_failed"] != 3 {
		t.Errorf("metrics charged %d, failed %d; want 2 and 3", metrics["worker_charged"], metrics["worker_failed"])
	}
	if metrics["worker_retried"] < 4*2 {
		t.Errorf("worker_retried = %d, want at least two attempts each for four payments", metrics["worker_retried"])
	}
}

// streamARN returns the latest stream of table.
func streamARN(t *testing.T, table string) *string {
	t.Helper()
	out, err := dynamotest.Client(t).DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Table.LatestStreamArn
}

// TestCrashDiscardsTheEnvironment crashes a charge once its answer is stored
// (and in the replay cache of the api function's environment), then sends
// the same request twice. As on AWS, where aws-lambda-go ends the process
// after a panic, the crash is a function error the gateway answers with the
// template's DEFAULT_5XX, and the crashed environment is gone: the first
// retry runs in a new one, whose empty cache sends it to the store, and
// only the second is a cache hit.
func TestCrashDiscardsTheEnvironment(t *testing.T) {
	stack, out, _ := startRecovery(t)
	key := fmt.Sprintf("discard-%d", time.Now().UnixNano())
	body := `{"amount": 1500, "currency": "USD", "customer": "cus_42", "source": "tok_visa"}`
	crashed := send(t, stack.URL(), "/v1/charges", key, "after-complete", body)
	wantProblem(t, crashed, http.StatusBadGateway, "function_failed")
	first := send(t, stack.URL(), "/v1/charges", key, "", body)
	second := send(t, stack.URL(), "/v1/charges", key, "", body)
	for i, r := range []response{first, second} {
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry %d = %d (replayed %q) %s, want the charge's 201 replayed", i, r.status, r.header.Get("Idempotent-Replayed"), r.body)
		}
	}

	// The api function's request lines, by API Gateway's request ID.
	lines := map[string]map[string]any{}
	var functionErrors []map[string]any
	for _, l := range out.Lines(t) {
		switch {
		case l["function"] == "api" && l["msg"] == "request":
			lines[fmt.Sprint(l["request_id"])] = l
		case l["function"] == "api" && strings.HasPrefix(fmt.Sprint(l["msg"]), "lambdaenv: function error"):
			functionErrors = append(functionErrors, l)
		}
	}
	if len(functionErrors) != 1 || functionErrors[0]["error_type"] != "Crash" ||
		functionErrors[0]["error_message"] != "fault: injected crash after-complete" {
		t.Errorf("function error lines = %v, want one, errorType Crash", functionErrors)
	}
	for _, tt := range []struct {
		name     string
		r        response
		cacheHit bool
	}{
		{"crash", crashed, false},
		{"first retry, in a new environment", first, false},
		{"second retry, in the same", second, true},
	} {
		l, ok := lines[tt.r.header.Get("X-Amzn-Requestid")]
		if !ok {
			t.Errorf("%s: no request line of the api function for request %s", tt.name, tt.r.header.Get("X-Amzn-Requestid"))
			continue
		}
		if got := l["cache_hit"] == true; got != tt.cacheHit {
			t.Errorf("%s: cache_hit = %v, want %v (line %v)", tt.name, got, tt.cacheHit, l)
		}
	}
	if t.Failed() {
		t.Logf("stack output:\n%s", out.String())
	}
}
