package recovery_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"context"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/provider"
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

// TestReconcileUndeliverable: a resolved answer that ReconcilerConfig's
// Deliverable refuses (here apigw.Deliverable: a 7 MiB answer, more than
// Lambda returns) is not stored: the response_too_large problem is
// recorded instead, as the live request records it, so that no replay is
// an answer Lambda cannot return; an answer it accepts is stored as
// resolved.
func TestReconcileUndeliverable(t *testing.T) {
	big := append([]byte(`{"x":"`), append(bytes.Repeat([]byte("a"), 7<<20), '"', '}')...)
	tests := []struct {
		name        string
		body        []byte
		deliverable func(idempotency.Response) error
		wantStatus  int
	}{
		{"over Lambda's limit", big, apigw.Deliverable, http.StatusInternalServerError},
		{"no check", big, nil, http.StatusCreated},
		{"a usual answer", []byte(`{"id":"ch_1"}`), apigw.Deliverable, http.StatusCreated},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			key := idempotency.NewKey("acme", fmt.Sprintf("undeliverable-%d", i))
			_, _, ev := w.unknown(t, key, time.Now().Add(-10*time.Second))
			w.charge(t, key, "tok_visa")
			h := newHarness(t, config{Store: w.store, Provider: w.provider, Deliverable: tt.deliverable,
				Rebuild: func(idempotency.Record, provider.Charge) (idempotency.Response, error) {
					return idempotency.Response{Status: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: tt.body}, nil
				}})
			if failed := h.handle(t.Context(), t, ev); len(failed) > 0 {
				t.Fatalf("failed %v", failed)
			}
			rec, err := w.store.Get(t.Context(), key)
			if err != nil || rec.Status != idempotency.StatusCompleted || rec.Response == nil || rec.Response.Status != tt.wantStatus {
				t.Fatalf("record: %+v (err %v), want COMPLETED with %d", rec.Status, err, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusInternalServerError && !strings.Contains(string(rec.Response.Body), "response_too_large") {
				t.Errorf("answer %.200s, want response_too_large", rec.Response.Body)
			}
		})
	}
}
