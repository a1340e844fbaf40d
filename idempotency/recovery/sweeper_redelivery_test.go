package recovery_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

// TestSweeperRedeliveredAfterRestoreMoved: the Sweeper restores a record
// TTL deleted (an abandoned External reservation, or an UNKNOWN record
// never resolved) from its REMOVE; the restore then moves on the legitimate
// path (a retry redrives it, the reconciler completes it, or releases it
// because nothing happened, after which a retry may run the request anew);
// then the same REMOVE is delivered again, as a stream delivers at least
// once. The redelivery meets the sweeper's own restore, or what followed
// from it: it restores nothing a second time (the reconciler would look a
// settled request up again, and a released key would be held UNKNOWN again)
// and counts no zombie_unrestored (alarmed: it is meant for a new
// reservation that took the key before the restore, leaving the first
// attempt's outcome unreconciled, which is not the case here).
func TestSweeperRedeliveredAfterRestoreMoved(t *testing.T) {
	w := newWorld(t)
	kinds := []struct {
		name    string
		unknown bool // the deleted record is UNKNOWN, else an abandoned reservation
	}{
		{name: "abandoned reservation"},
		{name: "expired UNKNOWN", unknown: true},
	}
	moves := []struct {
		name    string
		charged bool // the provider charged the first attempt
		// move changes the restored record as the api or the reconciler
		// does; retry, when set, is a client's retry after it.
		move  func(t *testing.T, key idempotency.Key)
		retry bool
		want  func(t *testing.T, key idempotency.Key, before idempotency.Record, beforeErr error)
	}{
		{
			name: "a retry redrove it",
			move: func(t *testing.T, key idempotency.Key) {
				rec, err := w.store.Get(t.Context(), key)
				if err != nil {
					t.Fatal(err)
				}
				w.markUnknown(t, rec, time.Now().Add(retention), time.Now())
			},
		},
		{
			name: "the reconciler completed it", charged: true,
			move: func(t *testing.T, key idempotency.Key) { w.reconcileRestore(t, key, idempotency.StatusCompleted) },
		},
		{
			name: "the reconciler released it",
			move: func(t *testing.T, key idempotency.Key) { w.reconcileRestore(t, key, "") },
		},
		{
			name:  "the reconciler released it, and a retry ran the request anew",
			move:  func(t *testing.T, key idempotency.Key) { w.reconcileRestore(t, key, "") },
			retry: true,
		},
	}
	for _, kind := range kinds {
		for _, mv := range moves {
			t.Run(kind.name+"/"+mv.name, func(t *testing.T) {
				raw := strings.NewReplacer(" ", "-", "/", "-", ",", "").Replace(t.Name())
				key := idempotency.NewKey("acme", raw)
				now := time.Now()
				old := requestOf(t, key, chargeRequest, now.Add(-2*time.Minute), 30*time.Second)
				if mv.charged {
					if _, err := w.provider.Charge(t.Context(), old.ForwardKey(), chargeRequest); err != nil {
						t.Fatalf("provider Charge: %v", err)
					}
				}
				var remove events.DynamoDBEventRecord
				if kind.unknown {
					w.reserve(t, old)
					w.markUnknown(t, old, now.Add(-time.Second), now.Add(-time.Minute))
					img := w.image(t, key)
					dynamotest.Delete(t, w.db, w.names.ByLogicalID["IdempotencyTable"], key.ID())
					remove = lambdatest.Record(events.DynamoDBOperationTypeRemove, img, nil, lambdatest.TTLIdentity(), now)
				} else {
					remove = w.abandon(t, old)
				}

				// The first delivery restores it, Settle ago: the
				// reconciler may trust a "nothing happened" at once.
				first := newSweepHarness(t, w.store, func() time.Time { return now.Add(-2 * providerTimeout) })
				if failed := first.handle(t, remove); failed != nil {
					t.Fatalf("first delivery: failures = %v, want none", failed)
				}
				if got := lambdatest.Counts(t, first.metrics.String(), "sweeper")[recovery.MetricReconcileScheduled]; got != 1 {
					t.Fatalf("first delivery: reconcile_scheduled = %d, want 1 (restored)", got)
				}

				mv.move(t, key)
				var runs atomic.Int32
				if mv.retry {
					h := w.chargeRoute(t, retention, &runs)
					if rw := send(t, h, raw, chargeRequest); rw.Code != http.StatusCreated {
						t.Fatalf("retry after the release = %d %s, want 201 (the key was free)", rw.Code, rw.Body)
					}
				}
				before, beforeErr := w.store.Get(t.Context(), key)

				again := newSweepHarness(t, w.store, time.Now)
				if failed := again.handle(t, remove); failed != nil {
					t.Fatalf("redelivery: failures = %v, want none", failed)
				}
				counts := lambdatest.Counts(t, again.metrics.String(), "sweeper")
				if n := counts[recovery.MetricUnrestored]; n != 0 {
					t.Errorf("redelivery: zombie_unrestored = %d, want 0 (the key holds the restore's own sequel)", n)
				}
				if n := counts[recovery.MetricReconcileScheduled]; n != 0 {
					t.Errorf("redelivery: reconcile_scheduled = %d, want 0 (restored a second time)", n)
				}
				got, err := w.store.Get(t.Context(), key)
				switch {
				case errors.Is(beforeErr, idempotency.ErrNotFound):
					if !errors.Is(err, idempotency.ErrNotFound) {
						t.Errorf("after the redelivery: Get() = %s, %v; want the released key still free", got.Status, err)
					}
				case beforeErr != nil:
					t.Fatal(beforeErr)
				case err != nil || !cmp.Equal(before, got):
					t.Errorf("after the redelivery: Get() = %+v, %v; want the record unchanged: %+v", got, err, before)
				}
			})
		}
	}
}

// reconcileRestore hands the restored UNKNOWN record of key to a
// Reconciler, as its stream INSERT does, and checks that it ends as want:
// COMPLETED, or released (want "").
func (w world) reconcileRestore(t *testing.T, key idempotency.Key, want idempotency.Status) {
	t.Helper()
	rh := newHarness(t, config{Store: w.store, Provider: w.provider})
	insert := lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, w.image(t, key), nil, time.Now())
	if failed := rh.handle(t.Context(), t, insert); failed != nil {
		t.Fatalf("reconcile: failures = %v, want none\n%s", failed, rh.logs)
	}
	got, err := w.store.Get(t.Context(), key)
	switch {
	case want == "" && !errors.Is(err, idempotency.ErrNotFound):
		t.Fatalf("after reconciling: Get() = %s, %v; want the key released", got.Status, err)
	case want != "" && (err != nil || got.Status != want):
		t.Fatalf("after reconciling: Get() = %s, %v; want %s", got.Status, err, want)
	}
}

// TestSweeperMarksRestoreInMemory: the in-memory store marks a restore as
// the DynamoDB store does, so that a Sweeper on it recognises its own
// restore after the record was released, and after a retry reserved the
// key anew.
func TestSweeperMarksRestoreInMemory(t *testing.T) {
	store := memory.New()
	key := idempotency.NewKey("acme", "memory-redelivered")
	now := time.Now()
	old := reservation(key, now.Add(-2*time.Minute), 30*time.Second)
	remove := lambdatest.Record(events.DynamoDBOperationTypeRemove, stream.FromSDK(dynamo.ItemFromRecord(old)), nil, lambdatest.TTLIdentity(), now)
	h := newSweepHarness(t, store, time.Now)
	deliver := func(when string) {
		t.Helper()
		if failed := h.handle(t, remove); failed != nil {
			t.Fatalf("%s: failures = %v, want none", when, failed)
		}
	}
	deliver("first delivery")
	restored, err := store.Get(t.Context(), key)
	if err != nil || restored.Status != idempotency.StatusUnknown {
		t.Fatalf("after the first delivery: Get() = %s, %v; want UNKNOWN", restored.Status, err)
	}
	if err := store.Release(t.Context(), key, restored.LeaseToken, nil); err != nil {
		t.Fatalf("Release(restored): %v", err)
	}
	deliver("after the release")
	if got, err := store.Get(t.Context(), key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("after the release and a redelivery: Get() = %s, %v; want the key still free", got.Status, err)
	}
	retry := reservation(key, time.Now(), 30*time.Second)
	if err := store.Reserve(t.Context(), retry, nil, time.Now()); err != nil {
		t.Fatalf("Reserve(retry): %v", err)
	}
	deliver("after a retry reserved the key")
	want := map[string]int{recovery.MetricZombieSwept: 3, recovery.MetricReconcileScheduled: 1}
	if diff := cmp.Diff(want, lambdatest.Counts(t, h.metrics.String(), "sweeper")); diff != "" {
		t.Errorf("metrics mismatch (-want +got):\n%s", diff)
	}
}

// Both stores of the module mark the REMOVE records the Sweeper handles.
var (
	_ recovery.RestoreMarker = (*dynamo.Store)(nil)
	_ recovery.RestoreMarker = (*memory.Store)(nil)
)

// reserveOnly hides a store's RestoreMarker: a store of a user's own that
// has none.
type reserveOnly struct{ recovery.Reserver }

// TestSweeperCountsUnrestoredOnce: a new reservation took the key of an
// abandoned External reservation between its TTL deletion and the REMOVE's
// delivery; the Sweeper counts zombie_unrestored (alarmed), once however
// often the REMOVE is delivered, and once that reservation is gone, a
// redelivery does not restore the old record over the free key either: the
// REMOVE was handled. A store without RestoreMarker counts it at every
// delivery, as before marks.
func TestSweeperCountsUnrestoredOnce(t *testing.T) {
	w := newWorld(t)
	stores := []struct {
		name string
		new  func() (recovery.Reserver, idempotency.Store)
		want map[string]int
	}{
		{"dynamo", func() (recovery.Reserver, idempotency.Store) { return w.store, w.store },
			map[string]int{recovery.MetricZombieSwept: 3, recovery.MetricUnrestored: 1}},
		{"memory", func() (recovery.Reserver, idempotency.Store) { s := memory.New(); return s, s },
			map[string]int{recovery.MetricZombieSwept: 3, recovery.MetricUnrestored: 1}},
		{"memory without marks", func() (recovery.Reserver, idempotency.Store) { s := memory.New(); return reserveOnly{s}, s },
			map[string]int{recovery.MetricZombieSwept: 3, recovery.MetricUnrestored: 2, recovery.MetricReconcileScheduled: 1}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			sweepStore, store := st.new()
			key := idempotency.NewKey("acme", "unrestored-once-"+strings.ReplaceAll(st.name, " ", "-")+"-"+idempotency.NewToken())
			now := time.Now()
			old := reservation(key, now.Add(-2*time.Minute), 30*time.Second)
			remove := lambdatest.Record(events.DynamoDBOperationTypeRemove, stream.FromSDK(dynamo.ItemFromRecord(old)), nil, lambdatest.TTLIdentity(), now)
			h := newSweepHarness(t, sweepStore, time.Now)
			deliver := func(when string) {
				t.Helper()
				if failed := h.handle(t, remove); failed != nil {
					t.Fatalf("%s: failures = %v, want none", when, failed)
				}
			}
			retry := reservation(key, time.Now(), 30*time.Second)
			if err := store.Reserve(t.Context(), retry, nil, time.Now()); err != nil {
				t.Fatalf("Reserve(retry): %v", err)
			}
			deliver("first delivery")
			deliver("redelivery")
			if err := store.Release(t.Context(), key, retry.LeaseToken, nil); err != nil {
				t.Fatalf("Release(retry): %v", err)
			}
			deliver("redelivery after the retry's release")
			got, err := store.Get(t.Context(), key)
			marked := st.name != "memory without marks"
			switch {
			case marked && !errors.Is(err, idempotency.ErrNotFound):
				t.Errorf("after a redelivery over the free key: Get() = %s, %v; want the key free (the REMOVE was handled)", got.Status, err)
			case !marked && (err != nil || got.Status != idempotency.StatusUnknown):
				t.Errorf("without marks: Get() = %s, %v; want the old record restored UNKNOWN", got.Status, err)
			}
			if diff := cmp.Diff(st.want, lambdatest.Counts(t, h.metrics.String(), "sweeper")); diff != "" {
				t.Errorf("metrics mismatch (-want +got):\n%s", diff)
			}
			if warned := strings.Contains(h.logs.String(), "not a RestoreMarker"); warned == marked {
				t.Errorf("NewSweeper warned that the store is not a RestoreMarker: %t, want %t", warned, !marked)
			}
		})
	}
}

// TestSweeperRedeliveriesRaceARetry races, on DynamoDB Local, four
// deliveries of the REMOVE of an abandoned External reservation (a stream
// delivers at least once, a retried batch again) against the client's retry
// reserving the key, key after key: exactly one of them holds the key after,
// the restore at most once (reconcile_scheduled), zombie_unrestored counted
// exactly when the retry won (at least once: two deliveries that both find
// no mark before either writes it may both count), and a later delivery of
// the same REMOVE changes and counts nothing, whoever won.
func TestSweeperRedeliveriesRaceARetry(t *testing.T) {
	w := newWorld(t)
	const keys, deliveries = 16, 4
	wins := map[string]int{}
	for i := range keys {
		key := idempotency.NewKey("acme", fmt.Sprintf("race-%d-%s", i, idempotency.NewToken()))
		old := reservation(key, time.Now().Add(-2*time.Minute), 30*time.Second)
		remove := w.abandon(t, old)
		harnesses := make([]sweepHarness, deliveries)
		for d := range harnesses {
			harnesses[d] = newSweepHarness(t, w.store, time.Now)
		}
		retry := reservation(key, time.Now(), 30*time.Second)
		var (
			wg       sync.WaitGroup
			retryErr error
			start    = make(chan struct{})
		)
		for d := range harnesses {
			wg.Go(func() {
				<-start
				if failed := harnesses[d].handle(t, remove); failed != nil {
					t.Errorf("key %d delivery %d: failures = %v, want none", i, d, failed)
				}
			})
		}
		wg.Go(func() {
			<-start
			retryErr = w.store.Reserve(t.Context(), retry, nil, time.Now())
		})
		close(start)
		wg.Wait()

		counts := map[string]int{}
		for _, h := range harnesses {
			for name, n := range lambdatest.Counts(t, h.metrics.String(), "sweeper") {
				counts[name] += n
			}
		}
		rec, err := w.store.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("key %d: Get() = %v, want the restore or the retry", i, err)
		}
		// The store keeps times to the millisecond.
		restoreWon := rec.Status == idempotency.StatusUnknown && rec.CreatedAt.UnixMilli() == old.CreatedAt.UnixMilli() && rec.Fingerprint == old.Fingerprint
		retryWon := rec.Status == idempotency.StatusInProgress && rec.LeaseToken == retry.LeaseToken
		switch {
		case restoreWon == retryWon:
			t.Fatalf("key %d: the key holds %s (created %v, lease %s): want exactly one of the restore and the retry", i, rec.Status, rec.CreatedAt, rec.LeaseToken)
		case restoreWon:
			wins["restore"]++
			if retryErr == nil {
				t.Errorf("key %d: the restore holds the key, yet the retry's Reserve succeeded", i)
			}
			if counts[recovery.MetricReconcileScheduled] != 1 || counts[recovery.MetricUnrestored] != 0 {
				t.Errorf("key %d: the restore won; counts %v, want reconcile_scheduled 1, no zombie_unrestored", i, counts)
			}
		default:
			wins["retry"]++
			if retryErr != nil {
				t.Errorf("key %d: the retry holds the key, yet its Reserve = %v", i, retryErr)
			}
			if counts[recovery.MetricReconcileScheduled] != 0 || counts[recovery.MetricUnrestored] < 1 {
				t.Errorf("key %d: the retry won; counts %v, want no reconcile_scheduled, zombie_unrestored at least once", i, counts)
			}
		}
		if counts[recovery.MetricZombieSwept] != deliveries {
			t.Errorf("key %d: zombie_swept %d, want one per delivery (%d)", i, counts[recovery.MetricZombieSwept], deliveries)
		}

		late := newSweepHarness(t, w.store, time.Now)
		if failed := late.handle(t, remove); failed != nil {
			t.Fatalf("key %d late delivery: failures = %v", i, failed)
		}
		after, err := w.store.Get(t.Context(), key)
		if err != nil || after.LeaseToken != rec.LeaseToken || after.Status != rec.Status {
			t.Errorf("key %d: a late delivery changed the key: %s %s (%v), want %s %s", i, after.Status, after.LeaseToken, err, rec.Status, rec.LeaseToken)
		}
		want := map[string]int{recovery.MetricZombieSwept: 1}
		if diff := cmp.Diff(want, lambdatest.Counts(t, late.metrics.String(), "sweeper")); diff != "" {
			t.Errorf("key %d: a late delivery's metrics mismatch (-want +got):\n%s", i, diff)
		}
	}
	t.Logf("winners over %d keys: %v", keys, wins)
}
