package reconciler_test

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/reconciler"
)

// TestResolversAreTheAPIs: the reconciler builds its resolvers from the
// domain packages, without the API's routes; it must resolve exactly the
// API's External routes (api.Resolvers, taken from the routes the api
// function serves), each with the resolver the route is wrapped with, wired
// the same way (tables, store, timeout, a provider).
func TestResolversAreTheAPIs(t *testing.T) {
	env := map[string]string{
		config.EnvProviderURL:     "http://127.0.0.1:9/provider",
		config.EnvProviderTimeout: "7s",
		// Not the default: the orders Resolver must get it as the route does.
		config.EnvProviderKeyRetention: "30h",
	}
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	client := dynamodb.New(dynamodb.Options{Region: "eu-west-1"})
	opts := app.Options{Now: func() time.Time { return time.Unix(1700000000, 0) }}
	want, err := api.Resolvers(cfg, client, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatal("api.Resolvers() is empty: the API has no External route")
	}
	got, err := reconciler.Resolvers(cfg, client, opts)
	if err != nil {
		t.Fatal(err)
	}
	wantRoutes, gotRoutes := slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got))
	if diff := cmp.Diff(wantRoutes, gotRoutes); diff != "" {
		t.Fatalf("reconciler.Resolvers() routes mismatch (-the API's External routes +the reconciler's):\n%s", diff)
	}
	same := []cmp.Option{
		cmp.Exporter(func(reflect.Type) bool { return true }),
		// The one DynamoDB client, passed to both.
		cmp.Comparer(func(a, b *dynamodb.Client) bool { return a == b }),
		// Each builds its own provider client from cfg (its HTTP client
		// holds a function): both must have one.
		cmp.Comparer(func(a, b *provider.Client) bool { return (a == nil) == (b == nil) }),
		// opts.Now, passed to both.
		cmp.Comparer(func(a, b func() time.Time) bool { return a != nil && b != nil && a().Equal(b()) }),
	}
	for _, route := range wantRoutes {
		w, g := want[route], got[route]
		if reflect.TypeOf(w) != reflect.TypeOf(g) {
			t.Errorf("reconciler.Resolvers()[%q] is a %T, the API's route is wrapped with a %T", route, g, w)
			continue
		}
		if diff := cmp.Diff(w, g, same...); diff != "" {
			t.Errorf("reconciler.Resolvers()[%q] mismatch (-the API's +the reconciler's):\n%s", route, diff)
		}
	}
}

// TestHandlerLeavesResolveTime runs the function's handler on an UNKNOWN
// charge record that nothing settled yet (ONCE_PROVIDER_SETTLE a minute),
// in an invocation shorter than the settle time: it waits until the
// deadline less ResolveTime (ONCE_PROVIDER_TIMEOUT plus ResolveStoreCalls
// x StoreCallBound), not less the library's default, and then defers the
// record.
func TestHandlerLeavesResolveTime(t *testing.T) {
	const providerTimeout = 200 * time.Millisecond
	db := dynamotest.Client(t)
	names := dynamotest.Tables(t, db)
	srv := httptest.NewServer(simulator.New(simulator.Options{DB: db, Table: names.ByLogicalID["ProviderTable"]}))
	t.Cleanup(srv.Close)
	env := names.Env()
	env[config.EnvProviderURL] = srv.URL
	env[config.EnvProviderTimeout] = providerTimeout.String()
	env[config.EnvProviderSettle] = "1m"
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	resolveTime := reconciler.ResolveTime(cfg)
	if want := providerTimeout + reconciler.ResolveStoreCalls*reconciler.StoreCallBound; resolveTime != want || resolveTime == recovery.DefaultResolveTime {
		t.Fatalf("ResolveTime() = %v, want %v (ONCE_PROVIDER_TIMEOUT + ResolveStoreCalls x StoreCallBound, not the library's default)", resolveTime, want)
	}

	store := dynamo.New(db, cfg.Table("IdempotencyTable"))
	key := idempotency.NewKey("acme", "handler-resolve-time")
	now := time.Now()
	res := idempotency.Record{
		Key: key, Status: idempotency.StatusInProgress, Route: charges.Route, External: true,
		LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(30 * time.Second),
		Request: []byte(`{"amount":100,"currency":"usd","source":"tok_visa"}`), CreatedAt: now, UpdatedAt: now,
	}
	if err := store.Reserve(t.Context(), res, nil, now); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkUnknown(t.Context(), key, res.LeaseToken, idempotency.NewToken(), now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	img := stream.FromSDK(dynamotest.Item(t, db, cfg.Table("IdempotencyTable"), key.ID()))
	var metrics lambdatest.Buffer
	h, err := reconciler.Handler(cfg, db, app.Options{Logger: slog.New(slog.DiscardHandler), Metrics: &metrics})
	if err != nil {
		t.Fatal(err)
	}

	const left = 500 * time.Millisecond // the invocation's time beyond ResolveTime
	ctx, cancel := context.WithTimeout(t.Context(), resolveTime+left)
	defer cancel()
	start := time.Now()
	resp, err := h(ctx, events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
		lambdatest.Record(events.DynamoDBOperationTypeModify, nil, img, nil, now),
	}})
	took := time.Since(start)
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("handler() = %+v, %v; want the record failed (deferred)", resp, err)
	}
	if took < left-50*time.Millisecond || took > left+300*time.Millisecond {
		t.Errorf("handler() took %v, want about %v: to wait until the deadline less ResolveTime (%v)", took, left, resolveTime)
	}
	if diff := cmp.Diff(map[string]int{"reconcile_deferred": 1}, lambdatest.Counts(t, metrics.String(), "reconciler")); diff != "" {
		t.Errorf("metrics mismatch (-want +got):\n%s", diff)
	}
}

// TestProviderKeyMargin: the least ONCE_PROVIDER_KEY_RETENTION that config
// accepts counts the margin the orders flow keeps under it; config declares
// it without importing the orders domain, so the two are held equal here,
// where both are linked.
func TestProviderKeyMargin(t *testing.T) {
	if config.ProviderKeyMargin != orders.KeyRetentionMargin {
		t.Errorf("config.ProviderKeyMargin = %s, orders.KeyRetentionMargin = %s; want them equal", config.ProviderKeyMargin, orders.KeyRetentionMargin)
	}
}

// TestStoreCallBoundIsTheClients: StoreCallBound is the reconciler's store
// client's worst case for one call (dynamoclient.CallBound with the
// options app.DynamoDB builds it with), so the calls of a resolution that
// used all of ONCE_PROVIDER_TIMEOUT still fit in the invocation.
func TestStoreCallBoundIsTheClients(t *testing.T) {
	if bound := dynamoclient.CallBound(dynamoclient.Options{}); reconciler.StoreCallBound != bound {
		t.Errorf("StoreCallBound = %v, want dynamoclient.CallBound = %v", reconciler.StoreCallBound, bound)
	}
}

// countingDoer is a DynamoDB client's HTTP client that notes the operation
// of every request it sends.
type countingDoer struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	mu  *sync.Mutex
	ops *[]string
}

func (d countingDoer) Do(r *http.Request) (*http.Response, error) {
	d.mu.Lock()
	*d.ops = append(*d.ops, strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810."))
	d.mu.Unlock()
	return d.next.Do(r)
}

// TestResolveTimeCoversAnOrder resolves an order abandoned at order_created
// through the function's handler, against DynamoDB Local and the provider
// simulator, counting the calls the resolution makes: ResolveTime, which a
// record waiting for the settle leaves its invocation, must cover each of
// them at its worst, the provider's ONCE_PROVIDER_TIMEOUT and each
// DynamoDB call's dynamoclient.CallBound (the consistent read of the order
// before its charge included), or a resolution can run past the
// invocation's deadline.
func TestResolveTimeCoversAnOrder(t *testing.T) {
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
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}

	// An order reserved at order_created (its write with the reservation,
	// as the handler's Begin makes it), then handed on UNKNOWN.
	store := dynamo.New(db, cfg.Table("IdempotencyTable"))
	key := idempotency.NewKey("acme", "resolve-time-order")
	now := time.Now()
	body := []byte(`{"amount":4200,"currency":"usd","customer":"cus_42","source":"tok_visa","email":"a@example.com"}`)
	req, err := orders.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	o := orders.New(key.Tenant, orders.ID(key, "fingerprint"), req, now)
	point, data, hold, err := orders.Flow{Orders: cfg.Table("OrdersTable")}.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	res := idempotency.Record{
		Key: key, Status: idempotency.StatusInProgress, Route: orders.RouteCreate, External: true, Fingerprint: "fingerprint",
		LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(30 * time.Second),
		Request: body, Point: point, Data: data, CreatedAt: now, UpdatedAt: now,
	}
	if err := store.Reserve(t.Context(), res, []idempotency.Effect{hold}, now); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkUnknown(t.Context(), key, res.LeaseToken, idempotency.NewToken(), now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	img := stream.FromSDK(dynamotest.Item(t, db, cfg.Table("IdempotencyTable"), key.ID()))

	var mu sync.Mutex
	var ops []string
	counted := dynamodb.New(db.Options(), func(o *dynamodb.Options) {
		o.HTTPClient = countingDoer{next: o.HTTPClient, mu: &mu, ops: &ops}
	})
	var metrics lambdatest.Buffer
	h, err := reconciler.Handler(cfg, counted, app.Options{Logger: slog.New(slog.DiscardHandler), Metrics: &metrics})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ops = nil // only the resolution's calls
	mu.Unlock()
	resp, err := h(t.Context(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
		lambdatest.Record(events.DynamoDBOperationTypeModify, nil, img, nil, now),
	}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("handler() = %+v, %v; want the order resolved", resp, err)
	}
	if diff := cmp.Diff(map[string]int{"reconcile_resolved": 1}, lambdatest.Counts(t, metrics.String(), "reconciler")); diff != "" {
		t.Fatalf("metrics mismatch (-want +got):\n%s", diff)
	}
	got, err := store.Get(t.Context(), key)
	if err != nil || got.Status != idempotency.StatusCompleted || got.Point != orders.PointFinished {
		t.Fatalf("the record after the resolution: %s at %q, %v; want %s at %q", got.Status, got.Point, err, idempotency.StatusCompleted, orders.PointFinished)
	}

	mu.Lock()
	calls := slices.Clone(ops)
	mu.Unlock()
	if providerCalls.Load() != 1 || len(calls) == 0 || calls[0] != "GetItem" {
		t.Fatalf("the resolution made %d provider call(s) and the DynamoDB calls %v; want 1, the first a GetItem (the order's read before its charge)", providerCalls.Load(), calls)
	}
	worst := time.Duration(providerCalls.Load())*cfg.ProviderTimeout + time.Duration(len(calls))*dynamoclient.CallBound(dynamoclient.Options{})
	if rt := reconciler.ResolveTime(cfg); rt < worst {
		t.Errorf("ResolveTime() = %v, want at least %v: the order's resolution made %d provider call(s) (%v each at most) and the DynamoDB calls %v (%v each at most)",
			rt, worst, providerCalls.Load(), cfg.ProviderTimeout, calls, dynamoclient.CallBound(dynamoclient.Options{}))
	}
}
