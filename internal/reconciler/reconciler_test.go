package reconciler_test

import (
	"context"
	"log/slog"
	"maps"
	"net/http/httptest"
	"reflect"
	"slices"
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
// deadline less ResolveTime (ONCE_PROVIDER_TIMEOUT plus WriteMargin), not
// less the library's default, and then defers the record.
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
	if want := providerTimeout + reconciler.WriteMargin; resolveTime != want || resolveTime == recovery.DefaultResolveTime {
		t.Fatalf("ResolveTime() = %v, want %v (ONCE_PROVIDER_TIMEOUT + WriteMargin, not the library's default)", resolveTime, want)
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

// TestWriteMarginCoversTheClient: WriteMargin is the reconciler's store
// client's worst case for one call (dynamoclient.CallBound with the
// options app.DynamoDB builds it with), so the write after a look-up that
// used all of ONCE_PROVIDER_TIMEOUT still fits in the invocation.
func TestWriteMarginCoversTheClient(t *testing.T) {
	if bound := dynamoclient.CallBound(dynamoclient.Options{}); reconciler.WriteMargin < bound {
		t.Errorf("WriteMargin = %v, want at least dynamoclient.CallBound = %v", reconciler.WriteMargin, bound)
	}
}
