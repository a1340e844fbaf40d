package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/internal/racing"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
)

// racers is how many goroutines act on one record at once.
const racers = 8

// applied is how many times the counting effect of key was written: the
// number of the writes that carried it.
func applied(t *testing.T, w world, key idempotency.Key) int {
	t.Helper()
	pk := "applied#" + key.ID()
	if !dynamotest.Exists(t, w.db, w.names.ByLogicalID["PaymentsTable"], pk) {
		return 0
	}
	n, ok := dynamotest.Item(t, w.db, w.names.ByLogicalID["PaymentsTable"], pk)["n"].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("counting item %s has no number n", pk)
	}
	var got int
	if _, err := fmt.Sscan(n.Value, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestReconcilerConcurrent: the Reconciler is safe for concurrent use.
// racers goroutines reconcile the same UNKNOWN record image at once (as
// overlapping deliveries of one stream record do), for several records at
// once, on DynamoDB Local: every call ends without an error (the losers
// find the record finalised, which is no failure), each record is
// finalised once, and the resolution's effects (a counter each write of
// them adds one to) are written once per record, with the completion or
// the release that carries them.
func TestReconcilerConcurrent(t *testing.T) {
	w := newWorld(t)
	payments := w.names.ByLogicalID["PaymentsTable"]
	const records = 3
	for _, tt := range []struct {
		name   string
		charge bool // the provider charged: completed, else released
	}{
		{"charged: completed once", true},
		{"not charged: released once", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var resolves atomic.Int32
			charges := chargeResolver(w.provider, rebuild)
			resolver := idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
				resolves.Add(1)
				res, err := charges.Resolve(ctx, rec)
				if err != nil {
					return res, err
				}
				res.Effects = append(res.Effects, dynamo.Update{
					Table: payments, Key: map[string]any{"pk": "applied#" + rec.Key.ID()},
					Update: "ADD #n :one", Names: map[string]string{"#n": "n"}, Values: map[string]any{":one": 1},
				})
				return res, nil
			})
			h := harness{metrics: &lambdatest.Buffer{}, logs: &lambdatest.Buffer{}}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("reconciler logs:\n%s", h.logs.String())
				}
			})
			r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
				Store: w.store, Resolvers: idempotency.Resolvers{route: resolver}, Settle: providerTimeout, Retention: retention,
				Logger:  slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				Metrics: metrics.New(h.metrics, "once", map[string]string{"Service": "reconciler"}),
			})
			if err != nil {
				t.Fatal(err)
			}
			recs := make([]idempotency.Record, records)
			for i := range recs {
				key := idempotency.NewKey("acme", fmt.Sprintf("concurrent %s %d", tt.name, i))
				_, recs[i], _ = w.unknown(t, key, time.Now().Add(-10*time.Second))
				if tt.charge {
					w.charge(t, key, "tok_visa")
				}
			}
			errs := racing.All(records*racers, func(i int) error {
				return r.Reconcile(t.Context(), nil, recs[i%records])
			})
			for i, err := range errs {
				if err != nil {
					t.Errorf("Reconcile(record %d) by racer %d = %v, want nil", i%records, i/records, err)
				}
			}
			for i, rec := range recs {
				if n := applied(t, w, rec.Key); n != 1 {
					t.Errorf("record %d: the resolution's effects were written %d times, want once", i, n)
				}
				got, err := w.store.Get(t.Context(), rec.Key)
				switch {
				case !tt.charge:
					if !errors.Is(err, idempotency.ErrNotFound) {
						t.Errorf("record %d: Get() = %s, %v; want ErrNotFound (released)", i, got.Status, err)
					}
				case err != nil || got.Status != idempotency.StatusCompleted || got.LeaseToken != rec.LeaseToken || got.Response == nil:
					t.Errorf("record %d: Get() = %s (lease kept %v), %v; want COMPLETED under its lease, with the charge's answer", i, got.Status, got.LeaseToken == rec.LeaseToken, err)
				}
			}
			counts := lambdatest.Counts(t, h.metrics.String(), "reconciler")
			if n := counts[recovery.MetricFailed] + counts[recovery.MetricDeferred]; n != 0 {
				t.Errorf("reconcile_failed + reconcile_deferred = %d, want 0", n)
			}
			if n := counts[recovery.MetricResolved]; n < records {
				t.Errorf("reconcile_resolved = %d, want at least %d (one per record)", n, records)
			}
			t.Logf("%d resolver calls, %d reconcile_resolved, for %d records by %d racers each", resolves.Load(), counts[recovery.MetricResolved], records, racers)
		})
	}
}

// countingStore is a CheckStore that counts, by key, the MarkUnknown and
// Release calls that succeeded.
type countingStore struct {
	recovery.CheckStore
	mu    sync.Mutex
	wrote map[string]int
}

func (s *countingStore) count(key idempotency.Key, err error) error {
	if err == nil {
		s.mu.Lock()
		s.wrote[key.ID()]++
		s.mu.Unlock()
	}
	return err
}

func (s *countingStore) MarkUnknown(ctx context.Context, key idempotency.Key, lease, newLease string, expiresAt, now time.Time) error {
	return s.count(key, s.CheckStore.MarkUnknown(ctx, key, lease, newLease, expiresAt, now))
}

func (s *countingStore) Release(ctx context.Context, key idempotency.Key, lease string, effects []idempotency.Effect) error {
	return s.count(key, s.CheckStore.Release(ctx, key, lease, effects))
}

// countingQueue is a Queue that counts what it is sent.
type countingQueue struct{ sent atomic.Int32 }

func (q *countingQueue) Send(context.Context, string, time.Duration) error {
	q.sent.Add(1)
	return nil
}

// TestCheckerConcurrent: the Checker is safe for concurrent use. racers
// goroutines handle the same check at once (as overlapping deliveries of
// one SQS message do), for records of each kind the Checker acts on, all
// at once, on DynamoDB Local: every call ends without an error, and each
// record is handed on once: one MarkUnknown (an abandoned External
// reservation, an UNKNOWN record at its expiry) or one Release (an
// abandoned Leased reservation) succeeds, under the checked lease, and
// the metrics count each record once.
func TestCheckerConcurrent(t *testing.T) {
	e := newSweepEnv(t)
	// A minute ahead, as in TestChecker: the leases have run out for the
	// Checker, not yet for DynamoDB Local's TTL.
	now := time.Now().Add(time.Minute)
	type kind struct {
		name     string
		external bool
		unknown  bool
		want     idempotency.Status // "" for released
	}
	kinds := []kind{
		{"external", true, false, idempotency.StatusUnknown},
		{"leased", false, false, ""},
		{"unknown", true, true, idempotency.StatusUnknown},
	}
	const perKind = 2
	var recs []idempotency.Record
	var kindOf []kind
	for _, k := range kinds {
		for i := range perKind {
			key := idempotency.NewKey("acme", fmt.Sprintf("checker-concurrent %s %d", k.name, i))
			rec := sweptReservation(key, k.external, now.Add(-time.Minute), now.Add(-time.Second))
			if err := e.store.Reserve(t.Context(), rec, nil, rec.CreatedAt); err != nil {
				t.Fatal(err)
			}
			if k.unknown {
				token, changed := idempotency.NewToken(), now.Add(-30*time.Second)
				if err := e.store.MarkUnknown(t.Context(), key, rec.LeaseToken, token, now.Add(-time.Second), changed); err != nil {
					t.Fatal(err)
				}
				rec.Status, rec.LeaseToken, rec.UpdatedAt, rec.UnknownSince = idempotency.StatusUnknown, token, changed, changed
			}
			recs, kindOf = append(recs, rec), append(kindOf, k)
		}
	}
	store := &countingStore{CheckStore: e.store, wrote: map[string]int{}}
	queue := &countingQueue{}
	h := newCheckHarness(t)
	c, err := recovery.NewChecker(recovery.CheckerConfig{
		Store: store, Queue: queue, Retention: retention, Logger: h.logger(), Metrics: h.counter("checker"),
		Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	errs := racing.All(len(recs)*racers, func(i int) error {
		return c.Check(t.Context(), nil, recovery.NewCheck(recs[i%len(recs)]))
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("Check(%s record) by racer %d = %v, want nil", kindOf[i%len(recs)].name, i/len(recs), err)
		}
	}
	for i, rec := range recs {
		k := kindOf[i]
		if n := store.wrote[rec.Key.ID()]; n != 1 {
			t.Errorf("%s record %s: %d MarkUnknown or Release calls succeeded, want 1", k.name, rec.Key.Short(), n)
		}
		got, err := e.store.Get(t.Context(), rec.Key)
		if k.want == "" {
			if !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("%s record: Get() = %s, %v; want ErrNotFound (released)", k.name, got.Status, err)
			}
			continue
		}
		if err != nil || got.Status != k.want || got.LeaseToken == rec.LeaseToken || !got.ExpiresAt.Equal(now.Add(retention).Truncate(time.Millisecond)) {
			t.Errorf("%s record: Get() = %s (lease token new %v, expires %v), %v; want %s under a new lease token, expiring at %v",
				k.name, got.Status, got.LeaseToken != rec.LeaseToken, got.ExpiresAt, err, k.want, now.Add(retention))
		}
	}
	if n := queue.sent.Load(); n != 0 {
		t.Errorf("%d checks sent on, want none: every record's deadline had passed", n)
	}
	want := map[string]int{
		recovery.MetricAbandoned:          2 * perKind,
		recovery.MetricUnknownRedriven:    perKind,
		recovery.MetricReconcileScheduled: 2 * perKind,
	}
	if diff := cmp.Diff(want, lambdatest.Counts(t, h.metrics.String(), "checker")); diff != "" {
		t.Errorf("metrics mismatch (-want +got):\n%s", diff)
	}
}
