package recovery_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	streamlocal "github.com/oncehq/once/internal/stream"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/samtemplate"
)

// templateFilter returns the FilterCriteria of function's stream event in
// template.yaml, as a Poller filter.
func templateFilter(t *testing.T, function string) func(events.DynamoDBEventRecord) bool {
	t.Helper()
	tmpl, err := samtemplate.Load(dynamotest.TemplatePath(t))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, ev := range tmpl.Functions()[function].Events() {
		if ev.Type == "DynamoDB" {
			if patterns, err = ev.FilterPatterns(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(patterns) == 0 {
		t.Fatalf("template.yaml: %s has no stream FilterCriteria", function)
	}
	return func(rec events.DynamoDBEventRecord) bool {
		b, err := json.Marshal(rec)
		if err != nil {
			t.Errorf("marshal stream record: %v", err)
			return false
		}
		ok, err := samtemplate.MatchFilters(patterns, b)
		if err != nil {
			t.Errorf("FilterCriteria of %s: %v", function, err)
		}
		return ok
	}
}

// run starts an event source mapping for h on the idempotency table until the
// test ends.
func (w world) run(t *testing.T, function string, h stream.Handler, logs *lambdatest.Buffer) {
	t.Helper()
	p, err := streamlocal.NewPoller(streamlocal.PollerOptions{
		Client:        dynamotest.Streams(t),
		DB:            w.db,
		Table:         w.names.ByLogicalID["IdempotencyTable"],
		Name:          function,
		Handler:       h,
		PollInterval:  100 * time.Millisecond,
		RetryBackoff:  50 * time.Millisecond,
		BisectOnError: true,
		Filter:        templateFilter(t, function),
		Logger:        slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	lambdatest.Start(t, p)
}

// TestRecoveryThroughTTL runs the TTL backstop of recovery on DynamoDB Local:
// reservations abandoned with a 1s lease are deleted by TTL (an External
// one's TTL, a day past its lease, brought forward), the sweeper
// (behind the template's FilterCriteria) sees the REMOVEs on the real stream,
// and the reconciler the UNKNOWN records the sweeper restores, with the
// provider simulator over HTTP. No client retries.
func TestRecoveryThroughTTL(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	sweeperMetrics, reconcilerMetrics, logs := &lambdatest.Buffer{}, &lambdatest.Buffer{}, &lambdatest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := recovery.NewSweeper(recovery.SweeperConfig{
		Store: w.store, Retention: retention, Logger: logger,
		Metrics: metrics.New(sweeperMetrics, "once", map[string]string{"Service": "sweeper"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
		Store: w.store, Resolvers: idempotency.Resolvers{route: chargeResolver(w.provider, rebuild)}, Settle: providerTimeout,
		Retention: retention, Logger: logger,
		Metrics: metrics.New(reconcilerMetrics, "once", map[string]string{"Service": "reconciler"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	w.run(t, "SweeperFunction", s.Handle, logs)
	w.run(t, "ReconcilerFunction", r.Handle, logs)

	now := time.Now()
	reserve := func(raw string, external bool, lease time.Duration) idempotency.Record {
		rec := reservation(idempotency.NewKey("acme", raw), now, lease)
		if !external {
			rec.External, rec.Request = false, nil
		}
		if err := w.store.Reserve(t.Context(), rec, nil, now); err != nil {
			t.Fatalf("Reserve(%s): %v", raw, err)
		}
		if external {
			// Make it a legacy item, written before External reservations
			// lost their TTL attribute (it was their lease deadline plus a
			// day, dynamo.ExternalReservationTTL), and bring that day
			// forward: TTL deletes it, and the sweeper restores it.
			_, err := w.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
				TableName:                 aws.String(w.names.ByLogicalID["IdempotencyTable"]),
				Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: rec.Key.ID()}},
				UpdateExpression:          aws.String("SET expires_at = :ttl"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":ttl": &types.AttributeValueMemberN{Value: fmt.Sprint(rec.ExpiresAt.Unix() + 1)}},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return rec
	}
	// The request called the provider, which charged, and died.
	charged := reserve("charged", true, time.Second)
	w.charge(t, charged.Key, "tok_visa")
	// The request died before its call reached the provider.
	uncharged := reserve("uncharged", true, time.Second)
	// A Leased request died: nothing to reconcile.
	leased := reserve("leased", false, time.Second)
	// A request released its key after a 5xx, within its lease.
	released := reserve("released", true, 30*time.Second)
	if err := w.store.Release(t.Context(), released.Key, released.LeaseToken, nil); err != nil {
		t.Fatal(err)
	}

	// Three abandoned reservations swept, two of them external and restored
	// for reconciliation, and both reconciled: one completed, one released.
	want := struct{ swept, resolved map[string]int }{
		swept:    map[string]int{"zombie_swept": 3, "reconcile_scheduled": 2},
		resolved: map[string]int{"reconcile_resolved": 2},
	}
	deadline := time.Now().Add(35 * time.Second)
	var final idempotency.Record
	for {
		got, err := w.store.Get(t.Context(), charged.Key)
		done := err == nil && got.Status == idempotency.StatusCompleted &&
			cmp.Equal(want.swept, lambdatest.Counts(t, sweeperMetrics.String(), "sweeper")) &&
			cmp.Equal(want.resolved, lambdatest.Counts(t, reconcilerMetrics.String(), "reconciler"))
		if done {
			final = got
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("35s after the reservations: charged key %s (%v); sweeper metrics %v, reconciler metrics %v; want COMPLETED, %v, %v",
				got.Status, err, lambdatest.Counts(t, sweeperMetrics.String(), "sweeper"), lambdatest.Counts(t, reconcilerMetrics.String(), "reconciler"), want.swept, want.resolved)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("recovered %v after the reservations", time.Since(now).Round(time.Millisecond))

	charge, err := w.provider.Lookup(t.Context(), charged.ForwardKey())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rebuild(charged, charge)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&resp, final.Response); diff != "" {
		t.Errorf("charged key: stored response mismatch (-want +got):\n%s", diff)
	}
	if final.Fingerprint != charged.Fingerprint || final.Route != charged.Route || !final.External {
		t.Errorf("charged key: completed record %+v does not keep the request's fingerprint, route and mode", final)
	}
	for _, rec := range []idempotency.Record{uncharged, leased, released} {
		if got, err := w.store.Get(t.Context(), rec.Key); !errors.Is(err, idempotency.ErrNotFound) {
			t.Errorf("key %s: Get() = %s, %v; want ErrNotFound", rec.Key.Short(), got.Status, err)
		}
	}
	if n := lambdatest.Counts(t, reconcilerMetrics.String(), "reconciler")["reconcile_failed"]; n != 0 {
		t.Errorf("reconcile_failed = %d, want 0", n)
	}

	// The original request of the charged key comes back and completes
	// with its own, stale lease: rejected, the stored response unchanged.
	zombie := charged
	zombie.Status, zombie.Request = idempotency.StatusCompleted, nil
	zombie.Response = &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{"zombie":true}`)}
	var conflict *idempotency.ConflictError
	if err := w.store.Complete(t.Context(), zombie, charged.LeaseToken, nil); !errors.As(err, &conflict) {
		t.Errorf("zombie Complete = %v, want a *ConflictError", err)
	}
	if got, err := w.store.Get(t.Context(), charged.Key); err != nil || !cmp.Equal(final, got) {
		t.Errorf("after the zombie: Get() = %+v, %v; want the reconciled record unchanged", got, err)
	}
}

// TestSweeperRestoresWithoutTTL: on DynamoDB Local, with its TTL and its
// stream, the two kinds of record TTL still deletes before their outcome is
// known are restored by the sweeper (behind the template's FilterCriteria)
// as UNKNOWN records without a TTL attribute, which TTL then leaves alone:
// an UNKNOWN item written before UNKNOWN records lost theirs (it carries
// expires_at), and an abandoned External reservation written before
// External reservations lost theirs (its TTL, a day past its lease,
// brought forward). Long after, and after TTL has run again,
// both are still UNKNOWN and hold their keys against a new reservation.
// No reconciler runs.
func TestSweeperRestoresWithoutTTL(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	table := w.names.ByLogicalID["IdempotencyTable"]
	sweeperMetrics, logs := &lambdatest.Buffer{}, &lambdatest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	s, err := recovery.NewSweeper(recovery.SweeperConfig{
		Store: w.store, Retention: time.Second, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Metrics: metrics.New(sweeperMetrics, "once", map[string]string{"Service": "sweeper"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	w.run(t, "SweeperFunction", s.Handle, logs)

	now := time.Now()
	// expire gives key's item a TTL attribute already past, as a legacy
	// UNKNOWN item's, or a legacy External reservation's a day on, would
	// be.
	expire := func(key idempotency.Key, status idempotency.Status) {
		t.Helper()
		_, err := w.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
			TableName:                 aws.String(table),
			Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key.ID()}},
			UpdateExpression:          aws.String("SET expires_at = :ttl"),
			ConditionExpression:       aws.String("#status = :status"),
			ExpressionAttributeNames:  map[string]string{"#status": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":ttl": &types.AttributeValueMemberN{Value: fmt.Sprint(now.Unix() - 1)}, ":status": &types.AttributeValueMemberS{Value: string(status)}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	legacy := reservation(idempotency.NewKey("acme", "legacy unknown"), now.Add(-time.Hour), 30*time.Second)
	legacy.Status, legacy.ExpiresAt = idempotency.StatusUnknown, now.Add(-time.Second)
	if err := w.store.Reserve(t.Context(), legacy, nil, now); err != nil {
		t.Fatal(err)
	}
	expire(legacy.Key, idempotency.StatusUnknown)
	abandoned := reservation(idempotency.NewKey("acme", "abandoned"), now.Add(-2*time.Second), time.Second)
	if err := w.store.Reserve(t.Context(), abandoned, nil, abandoned.CreatedAt); err != nil {
		t.Fatal(err)
	}
	expire(abandoned.Key, idempotency.StatusInProgress)

	// restored waits for rec's record to come back UNKNOWN under a new lease
	// token, and checks that it has no TTL attribute.
	restored := func(rec idempotency.Record) idempotency.Record {
		t.Helper()
		var got idempotency.Record
		lambdatest.WaitFor(t, 60*time.Second, "the restore of "+rec.Key.Short(), func() bool {
			var err error
			got, err = w.store.Get(t.Context(), rec.Key)
			return err == nil && got.LeaseToken != rec.LeaseToken
		})
		if got.Status != idempotency.StatusUnknown || got.Fingerprint != rec.Fingerprint || !got.CreatedAt.Equal(rec.CreatedAt.Truncate(time.Millisecond)) {
			t.Errorf("%s restored as %s (fingerprint kept %v, created at %v), want UNKNOWN, the request's", rec.Key.Short(),
				got.Status, got.Fingerprint == rec.Fingerprint, got.CreatedAt)
		}
		if ttl, ok := dynamotest.Item(t, w.db, table, rec.Key.ID())[dynamo.AttrExpiresAt]; ok {
			t.Errorf("%s restored with %s = %v, want none", rec.Key.Short(), dynamo.AttrExpiresAt, ttl)
		}
		return got
	}
	restoredLegacy, restoredAbandoned := restored(legacy), restored(abandoned)

	// TTL runs again (an expired COMPLETED record deleted), well past the
	// restored records' 1s retention: both stay, and hold their keys.
	control := idempotency.NewKey("acme", "control")
	done := reservation(control, now, time.Second)
	done.Status, done.ExpiresAt, done.Response = idempotency.StatusCompleted, now.Add(-2*time.Second), &idempotency.Response{Status: 201, Body: []byte("{}")}
	if err := w.store.Commit(t.Context(), done, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	lambdatest.WaitFor(t, 60*time.Second, "TTL deleting an expired COMPLETED record", func() bool {
		return !dynamotest.Exists(t, w.db, table, control.ID())
	})
	time.Sleep(2 * time.Second)
	for _, rec := range []idempotency.Record{restoredLegacy, restoredAbandoned} {
		got, err := w.store.Get(t.Context(), rec.Key)
		if err != nil || got.LeaseToken != rec.LeaseToken {
			t.Errorf("%s after TTL ran again: %s %v (lease kept %v), want the restored UNKNOWN record", rec.Key.Short(), got.Status, err, got.LeaseToken == rec.LeaseToken)
		}
		retry := reservation(rec.Key, time.Now(), 30*time.Second)
		var conflict *idempotency.ConflictError
		if err := w.store.Reserve(t.Context(), retry, nil, time.Now()); !errors.As(err, &conflict) || conflict.Existing == nil || conflict.Existing.Status != idempotency.StatusUnknown {
			t.Errorf("%s: Reserve(a retry) = %v, want a conflict with the UNKNOWN record", rec.Key.Short(), err)
		}
	}
	want := map[string]int{"zombie_swept": 1, "reconcile_scheduled": 2}
	if got := lambdatest.Counts(t, sweeperMetrics.String(), "sweeper"); !cmp.Equal(got, want) {
		t.Errorf("sweeper metrics = %v, want %v (no zombie_unrestored)", got, want)
	}
}
