package reconciler_test

import (
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/provider"
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

// TestProviderKeyMargin: the least ONCE_PROVIDER_KEY_RETENTION that config
// accepts counts the margin the orders flow keeps under it; config declares
// it without importing the orders domain, so the two are held equal here,
// where both are linked.
func TestProviderKeyMargin(t *testing.T) {
	if config.ProviderKeyMargin != orders.KeyRetentionMargin {
		t.Errorf("config.ProviderKeyMargin = %s, orders.KeyRetentionMargin = %s; want them equal", config.ProviderKeyMargin, orders.KeyRetentionMargin)
	}
}
