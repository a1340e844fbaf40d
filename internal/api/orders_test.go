package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/dynamo"
	apifn "github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/provider/simulator"
)

// slowReads is a DynamoDB client's HTTP client that holds every GetItem of
// table for delay (while delay is set) before sending it.
type slowReads struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	table string
	delay *atomic.Int64 // nanoseconds
}

func (s slowReads) Do(r *http.Request) (*http.Response, error) {
	if d := time.Duration(s.delay.Load()); d > 0 && strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".GetItem") && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"`+s.table+`"`)) {
			time.Sleep(d)
		}
	}
	return s.next.Do(r)
}

// TestOrderReadCountsAgainstTheCall sends an order through the api
// function's handler, against DynamoDB Local and the provider simulator,
// in an invocation whose deadline leaves the provider call its
// ONCE_PROVIDER_TIMEOUT when the request starts, but not once its order's
// read (before the charge) has been slow: the call is not made, the
// answer is 503 store_unavailable, and the lease is given up at
// order_created, so that a retry with time enough resumes there at once
// and charges the order once.
func TestOrderReadCountsAgainstTheCall(t *testing.T) {
	const (
		providerTimeout = 2 * time.Second
		slowRead        = 2 * time.Second
		invocation      = providerTimeout + time.Second // the call fits, but not after the slow read
	)
	db := dynamotest.Client(t)
	names := dynamotest.Tables(t, db)
	var providerCalls atomic.Int64
	sim := simulator.New(simulator.Options{DB: db, Table: names.ByLogicalID["ProviderTable"]})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		providerCalls.Add(1)
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	env := names.Env()
	env[config.EnvProviderURL] = srv.URL
	env[config.EnvProviderTimeout] = providerTimeout.String()
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	var delay atomic.Int64
	delay.Store(int64(slowRead))
	slow := dynamodb.New(db.Options(), func(o *dynamodb.Options) {
		o.HTTPClient = slowReads{next: o.HTTPClient, table: cfg.Table("OrdersTable"), delay: &delay}
	})
	h, err := apifn.Handler(cfg, slow, app.Options{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	fn := apigw.NewLambda(h)
	post := func(timeout time.Duration) events.APIGatewayProxyResponse {
		t.Helper()
		payload, err := json.Marshal(events.APIGatewayProxyRequest{
			HTTPMethod: http.MethodPost, Path: "/v1/orders", Resource: "/v1/orders",
			Headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": "order-read-deadline"},
			Body:    `{"amount":4200,"currency":"usd","customer":"cus_42","source":"tok_visa","email":"a@example.com"}`,
			RequestContext: events.APIGatewayProxyRequestContext{
				RequestID: "req-1", Authorizer: map[string]any{apigw.TenantKey: "acme"},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		out, err := fn.Invoke(ctx, payload)
		if err != nil {
			t.Fatalf("Invoke() error = %v", err)
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	store := dynamo.New(db, cfg.Table("IdempotencyTable"))
	key := idempotency.NewKey("acme", "order-read-deadline")

	resp := post(invocation)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(resp.Body, "store_unavailable") || providerCalls.Load() != 0 {
		t.Fatalf("after a %v read with %v left of a %v invocation: %d %s, %d provider call(s); want 503 store_unavailable and no call",
			slowRead, invocation-slowRead, invocation, resp.StatusCode, resp.Body, providerCalls.Load())
	}
	rec, err := store.Get(t.Context(), key)
	if err != nil || rec.Point != orders.PointOrderCreated || rec.Status != idempotency.StatusInProgress || rec.ExpiresAt.After(time.Now()) {
		t.Fatalf("the record after the 503: %s at %q, expires %v, %v; want %s at %q, its lease given up",
			rec.Status, rec.Point, rec.ExpiresAt, err, idempotency.StatusInProgress, orders.PointOrderCreated)
	}

	// The retry, reads fast again and time enough: resumed, charged once.
	delay.Store(0)
	resp = post(time.Minute)
	if resp.StatusCode != http.StatusCreated || providerCalls.Load() != 1 {
		t.Fatalf("the retry: %d %s after %d provider call(s) in all; want 201 after 1", resp.StatusCode, resp.Body, providerCalls.Load())
	}
}
