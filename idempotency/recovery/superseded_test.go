package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
)

// TestReconcileSupersededResume: a Resolver that resumes a multi-step
// request's phases (idempotency.ResumeSteps) from a stale stream image, the
// record finished since by an earlier delivery, finds its lease gone: the
// record is left as it is, and that is no failure (no retry, no
// reconcile_failed, no dead letter).
func TestReconcileSupersededResume(t *testing.T) {
	store := memory.New()
	now := time.Now()
	stale := idempotency.Record{
		Key: idempotency.NewKey("acme", "stale"), Status: idempotency.StatusUnknown, Route: "POST /v1/orders",
		Fingerprint: "fp", External: true, LeaseToken: "lease-1", ExpiresAt: now.Add(time.Hour),
		Request: []byte(`{}`), Point: "created", Data: map[string]string{"order": "o1"}, CreatedAt: now, UpdatedAt: now,
	}
	if err := store.Reserve(t.Context(), stale, nil, now); err != nil {
		t.Fatal(err)
	}
	done := stale
	done.Status, done.Response = idempotency.StatusCompleted, &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{}`)}
	if err := store.Complete(t.Context(), done, stale.LeaseToken, nil); err != nil {
		t.Fatal(err)
	}
	resumed := 0
	resolver := idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
		resumed++
		if err := idempotency.ResumeSteps(store, rec, nil).Advance(ctx, "charged", map[string]string{"charge": "c1"}); err != nil {
			return idempotency.Resolution{}, fmt.Errorf("resume: %w", err)
		}
		return idempotency.Resolution{Response: done.Response}, nil
	})
	out := &lambdatest.Buffer{}
	r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
		Store: store, Resolvers: idempotency.Resolvers{stale.Route: resolver}, Settle: time.Second,
		Metrics: metrics.New(out, "once", map[string]string{"Service": "reconciler"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(t.Context(), nil, stale); err != nil {
		t.Errorf("Reconcile(stale image) = %v, want nil: the record is finished", err)
	}
	if resumed != 1 {
		t.Errorf("resolver ran %d times, want 1", resumed)
	}
	if n := lambdatest.Counts(t, out.String(), "reconciler")[recovery.MetricFailed]; n != 0 {
		t.Errorf("reconcile_failed = %d, want 0", n)
	}
	if got, err := store.Get(t.Context(), stale.Key); err != nil || got.Status != idempotency.StatusCompleted || got.Point != "created" {
		t.Errorf("record = %s at %q, %v; want the COMPLETED record untouched", got.Status, got.Point, err)
	}
}

// TestReconcileRefusesLiveRecord: Reconcile handed a record that is not
// UNKNOWN (an IN_PROGRESS reservation, whose request may still be running
// under its lease, or a COMPLETED one) refuses it: the Resolver is not asked
// and the record is left as it is.
func TestReconcileRefusesLiveRecord(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, status := range []idempotency.Status{idempotency.StatusInProgress, idempotency.StatusCompleted} {
		t.Run(string(status), func(t *testing.T) {
			store := memory.New()
			rec := idempotency.Record{
				Key: idempotency.NewKey("acme", "live"), Status: status, Route: "POST /v1/transfers",
				Fingerprint: "fp", External: true, LeaseToken: "lease-1", ExpiresAt: now.Add(time.Hour),
				Request: []byte(`{}`), Point: "created", CreatedAt: now, UpdatedAt: now,
			}
			if status == idempotency.StatusCompleted {
				rec.LeaseToken = ""
				rec.Response = &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{}`)}
			}
			if err := store.Reserve(t.Context(), rec, nil, now); err != nil {
				t.Fatal(err)
			}
			asked := 0
			resolver := idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
				asked++
				return idempotency.Resolution{Response: &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{"resolved":true}`)}}, nil
			})
			r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
				Store: store, Resolvers: idempotency.Resolvers{rec.Route: resolver}, Settle: time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Reconcile(t.Context(), nil, rec); err == nil {
				t.Errorf("Reconcile(%s record) = nil, want an error", status)
			}
			if asked != 0 {
				t.Errorf("resolver asked %d times, want 0", asked)
			}
			if got, err := store.Get(t.Context(), rec.Key); err != nil || !cmp.Equal(got, rec) {
				t.Errorf("record after Reconcile = %+v, %v; want it untouched: %s", got, err, cmp.Diff(rec, got))
			}
		})
	}
}

// TestReconcileStatusMismatchFails: a Resolver that moves an UNKNOWN record
// with Store.Advance but leaves Progress.Status empty (IN_PROGRESS), under
// the record's own lease, makes a caller's mistake, not a lost lease: the
// store answers ErrStatusMismatch, not a conflict, and Reconcile fails the
// record (retried, reconcile_failed) instead of dropping it as finalised
// elsewhere and leaving it UNKNOWN silently. In both stores.
func TestReconcileStatusMismatchFails(t *testing.T) {
	for _, tt := range []struct {
		name  string
		store func(t *testing.T) idempotency.Store
	}{
		{"memory", func(t *testing.T) idempotency.Store { return memory.New() }},
		{"dynamo", func(t *testing.T) idempotency.Store {
			db := dynamotest.Client(t)
			return dynamo.New(db, dynamotest.Tables(t, db).ByLogicalID["IdempotencyTable"])
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := tt.store(t)
			now := time.Now().UTC().Truncate(time.Millisecond)
			rec := idempotency.Record{
				Key: idempotency.NewKey("acme", "mismatch"), Status: idempotency.StatusUnknown, Route: "POST /v1/orders",
				Fingerprint: "fp", External: true, LeaseToken: "lease-1", ExpiresAt: now.Add(time.Hour),
				Request: []byte(`{}`), CreatedAt: now, UpdatedAt: now,
			}
			if err := store.Reserve(t.Context(), rec, nil, now); err != nil {
				t.Fatal(err)
			}
			var advanced error
			resolver := idempotency.ResolverFunc(func(ctx context.Context, r idempotency.Record) (idempotency.Resolution, error) {
				advanced = store.Advance(ctx, r.Key, r.LeaseToken, idempotency.Progress{
					Point: "charged", Data: map[string]string{"charge": "c1"}, Added: map[string]string{"charge": "c1"},
					LeaseToken: "lease-2", ExpiresAt: now.Add(time.Hour), UpdatedAt: now.Add(time.Second),
				}, nil)
				if advanced != nil {
					return idempotency.Resolution{}, fmt.Errorf("resume: %w", advanced)
				}
				return idempotency.Resolution{Response: &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{}`)}}, nil
			})
			out := &lambdatest.Buffer{}
			r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
				Store: store, Resolvers: idempotency.Resolvers{rec.Route: resolver}, Settle: time.Second,
				Metrics: metrics.New(out, "once", map[string]string{"Service": "reconciler"}),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Reconcile(t.Context(), nil, rec); !errors.Is(err, idempotency.ErrStatusMismatch) {
				t.Errorf("Reconcile = %v, want an error wrapping ErrStatusMismatch: the record must be retried", err)
			}
			var conflict *idempotency.ConflictError
			if errors.As(advanced, &conflict) {
				t.Errorf("Advance(UNKNOWN record, own lease, Status \"\") = %v, want no *ConflictError", advanced)
			}
			if n := lambdatest.Counts(t, out.String(), "reconciler")[recovery.MetricFailed]; n != 1 {
				t.Errorf("reconcile_failed = %d, want 1", n)
			}
			if got, err := store.Get(t.Context(), rec.Key); err != nil || !cmp.Equal(got, rec) {
				t.Errorf("record after Reconcile = %+v, %v; want it untouched: %s", got, err, cmp.Diff(rec, got))
			}
		})
	}
}
