package recovery_test

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"context"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
)

// TestReconcileEffectsTooLarge: a resolution whose effects alone are more
// than one DynamoDB transaction carries (4 MB) can never be written with
// any answer, nor with the release of a request that had no effect. The
// reconciler must not fail on it at every delivery (a key that never
// resolves), nor release the key without them (a retry would take the
// holds they give back a second time): it records the response_too_large
// problem without the effects, counts reconcile_effects_dropped (alarmed)
// once, not reconcile_failed (the record is final, nothing is retried), and
// reports no failure. The same stream record delivered again (streams
// deliver at least once) finds the record completed and counts nothing.
func TestReconcileEffectsTooLarge(t *testing.T) {
	for _, tt := range []struct {
		name    string
		release bool // the resolution: no effect, its effects a release's
	}{
		{name: "completion"},
		{name: "release", release: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			payments := w.names.ByLogicalID["PaymentsTable"]
			key := idempotency.NewKey("acme", "effects-too-large")
			blob := make([]byte, 340_000)
			if _, err := rand.Read(blob); err != nil {
				t.Fatal(err)
			}
			resolver := idempotency.ResolverFunc(func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
				var res idempotency.Resolution
				if !tt.release {
					res.Response = &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{}`)}
				}
				for i := range 13 {
					res.Effects = append(res.Effects, dynamo.Insert(payments, "pk", map[string]any{"pk": fmt.Sprintf("%s#%d", key.ID(), i), "blob": blob}))
				}
				return res, nil
			})
			h := harness{metrics: &lambdatest.Buffer{}, logs: &lambdatest.Buffer{}}
			r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
				Store:     w.store,
				Resolvers: idempotency.Resolvers{route: resolver},
				Settle:    providerTimeout,
				Retention: retention,
				Logger:    slog.New(slog.NewJSONHandler(h.logs, nil)),
				Metrics:   metrics.New(h.metrics, "once", map[string]string{"Service": "reconciler"}),
			})
			if err != nil {
				t.Fatal(err)
			}
			h.r = r
			_, _, change := w.unknown(t, key, time.Now().Add(-10*time.Second))
			if failed := h.handle(t.Context(), t, change); len(failed) != 0 {
				t.Fatalf("failed records %v, want none: the key must end here\n%s", failed, h.logs)
			}
			// Redelivered: the record is completed already.
			if failed := h.handle(t.Context(), t, change); len(failed) != 0 {
				t.Fatalf("redelivery: failed records %v, want none\n%s", failed, h.logs)
			}
			rec, err := w.store.Get(t.Context(), key)
			if err != nil || rec.Status != idempotency.StatusCompleted || rec.Response == nil ||
				rec.Response.Status != http.StatusInternalServerError || !strings.Contains(string(rec.Response.Body), "response_too_large") {
				t.Errorf("record: %s (err %v), want COMPLETED with 500 response_too_large", rec.Status, err)
			}
			if dynamotest.Exists(t, w.db, payments, key.ID()+"#0") {
				t.Error("an effect was written, want none: they are over the limit together")
			}
			counts := lambdatest.Counts(t, h.metrics.String(), "reconciler")
			if n := counts[recovery.MetricEffectsDropped]; n != 1 {
				t.Errorf("%s = %d, want 1 (alarmed: the effects were not written; once, not again on the redelivery)", recovery.MetricEffectsDropped, n)
			}
			if n := counts[recovery.MetricFailed]; n != 0 {
				t.Errorf("%s = %d, want 0: the record ended completed, nothing is retried", recovery.MetricFailed, n)
			}
			if n := counts[recovery.MetricResolved]; n != 0 {
				t.Errorf("%s = %d, want 0: the key ended with its effects dropped, not as resolved", recovery.MetricResolved, n)
			}
			if !strings.Contains(h.logs.String(), "not written") {
				t.Errorf("logs say nothing of the effects not written:\n%s", h.logs)
			}
		})
	}
}
