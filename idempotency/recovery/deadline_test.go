package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/lambdatest"
)

// maxDeliveries is how often the template's reconciler mapping delivers a
// record: once, and MaximumRetryAttempts (10) times again.
const maxDeliveries = 11

// TestReconcilerSettleLongerThanInvocation is the stream's view of a Settle
// longer than the reconciler's invocation: one record whose request never
// reached the provider (nothing there, not settled) and one whose request
// charged, in one batch, delivered as the event source mapping does with
// ReportBatchItemFailures: each delivery bounded by the function's timeout,
// the next one starting at the first failed record, at most maxDeliveries
// times. Each delivery must spend its time waiting (all of it but
// ResolveTime), so that a later delivery finds the settle time passed and
// releases the key; the charged record completes in the first delivery that
// reaches it. Failing every delivery at once instead spends the retries in
// milliseconds and leaves both keys UNKNOWN.
func TestReconcilerSettleLongerThanInvocation(t *testing.T) {
	const (
		settle     = 2500 * time.Millisecond
		invocation = time.Second // the function's timeout, shorter than settle
		// Left after the settle time falls late in a delivery's wait: the
		// look-up and the release must fit in it under make test's load.
		resolveTime = 400 * time.Millisecond
	)
	w := newWorld(t)
	for _, tt := range []struct {
		name         string
		chargedFirst bool
	}{
		{"unsettled record first", false},
		{"charged record first", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			marked := time.Now()
			unsettledKey := idempotency.NewKey("acme", "settle-long-100-"+tt.name)
			chargedKey := idempotency.NewKey("acme", "settle-long-200-"+tt.name)
			_, _, unsettled := w.unknown(t, unsettledKey, marked)
			_, _, charged := w.unknown(t, chargedKey, marked)
			w.charge(t, chargedKey, "tok_visa")
			batch := []events.DynamoDBEventRecord{unsettled, charged}
			if tt.chargedFirst {
				batch = []events.DynamoDBEventRecord{charged, unsettled}
			}
			h := newHarness(t, config{Store: w.store, Provider: w.provider, Settle: settle, ResolveTime: resolveTime})

			deliveries := 0
			for len(batch) > 0 && deliveries < maxDeliveries {
				deliveries++
				ctx, cancel := context.WithTimeout(t.Context(), invocation)
				start := time.Now()
				failed := h.handle(ctx, t, batch...)
				took := time.Since(start)
				cancel()
				t.Logf("delivery %d of %d records: %v, failed %v", deliveries, len(batch), took.Round(time.Millisecond), len(failed))
				if deliveries == 1 && tt.chargedFirst {
					// The settled record ahead of the unsettled one is
					// resolved by the first delivery.
					if got, err := w.store.Get(t.Context(), chargedKey); err != nil || got.Status != idempotency.StatusCompleted {
						t.Errorf("charged record after the first delivery: Get() = %s, %v; want it COMPLETED", got.Status, err)
					}
					if diff := cmp.Diff([]string{unsettled.Change.SequenceNumber}, failed); diff != "" {
						t.Errorf("first delivery's failures mismatch (-want +got):\n%s", diff)
					}
				}
				if len(failed) > 0 && took < invocation-resolveTime-50*time.Millisecond {
					t.Errorf("delivery %d failed after %v, want it to wait until the deadline less ResolveTime (%v)", deliveries, took, invocation-resolveTime)
				}
				batch = from(batch, failed)
			}
			if len(batch) > 0 {
				t.Fatalf("after %d deliveries (%v since the records went UNKNOWN, Settle %v): %d records still failing, want none: "+
					"a Settle longer than one invocation must be waited out over the stream's retries", deliveries, time.Since(marked), settle, len(batch))
			}
			if deliveries < 2 {
				t.Errorf("resolved in %d delivery, want the unsettled record deferred at least once (Settle %v > invocation %v)", deliveries, settle, invocation)
			}
			if got, err := w.store.Get(t.Context(), unsettledKey); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("unsettled record: Get() = %s, %v; want ErrNotFound (released once Settle passed)", got.Status, err)
			}
			if done := time.Now(); done.Before(marked.Add(settle)) {
				t.Errorf("released %v after it went UNKNOWN, before Settle (%v)", done.Sub(marked), settle)
			}
			if got, err := w.store.Get(t.Context(), chargedKey); err != nil || got.Status != idempotency.StatusCompleted {
				t.Errorf("charged record: Get() = %s, %v; want it COMPLETED", got.Status, err)
			}
			want := map[string]int{"reconcile_resolved": 2, "reconcile_deferred": deliveries - 1}
			if diff := cmp.Diff(want, lambdatest.Counts(t, h.metrics.String(), "reconciler")); diff != "" {
				t.Errorf("metrics mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// from is the batch the mapping delivers after batch failed with failed:
// its records from the first failed one on.
func from(batch []events.DynamoDBEventRecord, failed []string) []events.DynamoDBEventRecord {
	if len(failed) == 0 {
		return nil
	}
	for i, r := range batch {
		if r.Change.SequenceNumber == failed[0] {
			return batch[i:]
		}
	}
	panic(fmt.Sprintf("failure %q names no record of the batch", failed[0]))
}

// TestReconcilerWaitBounded checks how long a record that finds nothing
// before its settle time waits: until the settle time when the invocation
// leaves ResolveTime after it, else until the deadline less ResolveTime
// (then deferred), at once when less than ResolveTime is left, and never
// past its context.
func TestReconcilerWaitBounded(t *testing.T) {
	w := newWorld(t)
	for i, tt := range []struct {
		name        string
		settle      time.Duration
		resolveTime time.Duration
		deadline    time.Duration // 0: none
		cancelAfter time.Duration // 0: never
		wantWait    time.Duration // how long Handle takes, within slack
		failed      bool
		metrics     map[string]int
	}{
		{
			name: "settles before the deadline less ResolveTime: waits, released", settle: 300 * time.Millisecond,
			resolveTime: 200 * time.Millisecond, deadline: 800 * time.Millisecond, wantWait: 300 * time.Millisecond,
			metrics: map[string]int{"reconcile_resolved": 1},
		},
		{
			name: "settles after it: waits until the deadline less ResolveTime, deferred", settle: time.Minute,
			resolveTime: 200 * time.Millisecond, deadline: 600 * time.Millisecond, wantWait: 400 * time.Millisecond,
			failed: true, metrics: map[string]int{"reconcile_deferred": 1},
		},
		{
			name: "less than ResolveTime left: deferred at once", settle: time.Minute,
			resolveTime: 1500 * time.Millisecond, deadline: time.Second,
			failed: true, metrics: map[string]int{"reconcile_deferred": 1},
		},
		{
			name: "ResolveTime unset is the default 5s: deferred at once", settle: time.Minute,
			deadline: 3 * time.Second,
			failed:   true, metrics: map[string]int{"reconcile_deferred": 1},
		},
		{
			name: "no deadline, context cancelled: stops waiting", settle: time.Minute,
			resolveTime: 200 * time.Millisecond, cancelAfter: 300 * time.Millisecond, wantWait: 300 * time.Millisecond,
			failed: true, metrics: map[string]int{"reconcile_failed": 1},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Generous: make test runs this with -race beside other
			// packages on two cores, and every case's wrong outcome is
			// further off than this (or caught by its failures and record).
			const slack = 350 * time.Millisecond
			key := idempotency.NewKey("acme", fmt.Sprintf("wait-bounded-%d", i))
			_, before, ev := w.unknown(t, key, time.Now())
			h := newHarness(t, config{Store: w.store, Provider: w.provider, Settle: tt.settle, ResolveTime: tt.resolveTime})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tt.deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			if tt.cancelAfter > 0 {
				time.AfterFunc(tt.cancelAfter, cancel)
			}
			start := time.Now()
			failed := h.handle(ctx, t, ev)
			took := time.Since(start)
			if took < tt.wantWait-100*time.Millisecond || took > tt.wantWait+slack {
				t.Errorf("Handle() took %v, want %v (within %v)", took, tt.wantWait, slack)
			}
			if got := len(failed) > 0; got != tt.failed {
				t.Errorf("Handle() failures = %v, want failed %v", failed, tt.failed)
			}
			got, err := w.store.Get(t.Context(), key)
			switch {
			case !tt.failed && !errors.Is(err, idempotency.ErrNotFound):
				t.Errorf("Get() = %s, %v; want ErrNotFound (released)", got.Status, err)
			case tt.failed && err != nil:
				t.Errorf("Get() = %v, want the record left UNKNOWN", err)
			case tt.failed && !cmp.Equal(before, got):
				t.Errorf("record changed (-before +after):\n%s", cmp.Diff(before, got))
			}
			if diff := cmp.Diff(tt.metrics, lambdatest.Counts(t, h.metrics.String(), "reconciler")); diff != "" {
				t.Errorf("metrics mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
