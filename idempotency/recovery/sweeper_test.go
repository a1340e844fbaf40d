package recovery_test

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
)

// sweepEnv is one test's DynamoDB Local tables and idempotency store.
type sweepEnv struct {
	db    *dynamodb.Client
	names dynamotest.Names
	store *dynamo.Store
}

func newSweepEnv(t *testing.T) sweepEnv {
	t.Helper()
	db := dynamotest.Client(t)
	names := dynamotest.Tables(t, db)
	return sweepEnv{db: db, names: names, store: dynamo.New(db, names.ByLogicalID["IdempotencyTable"])}
}

// image returns key's stored item as a stream image.
func (e sweepEnv) image(t *testing.T, key idempotency.Key) map[string]events.DynamoDBAttributeValue {
	t.Helper()
	return stream.FromSDK(dynamotest.Item(t, e.db, e.names.ByLogicalID["IdempotencyTable"], key.ID()))
}

// expire deletes key's item as DynamoDB's TTL process does.
func (e sweepEnv) expire(t *testing.T, key idempotency.Key) {
	t.Helper()
	dynamotest.Delete(t, e.db, e.names.ByLogicalID["IdempotencyTable"], key.ID())
}

// sweepHarness is a Sweeper with its metrics and logs.
type sweepHarness struct {
	s       *recovery.Sweeper
	metrics *lambdatest.Buffer
	logs    *lambdatest.Buffer
}

func newSweepHarness(t *testing.T, store recovery.Reserver, now func() time.Time) sweepHarness {
	t.Helper()
	h := sweepHarness{metrics: &lambdatest.Buffer{}, logs: &lambdatest.Buffer{}}
	s, err := recovery.NewSweeper(recovery.SweeperConfig{
		Store:     store,
		Retention: retention,
		Logger:    slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:   metrics.New(h.metrics, "once", map[string]string{"Service": "sweeper"}),
		Now:       now,
	})
	if err != nil {
		t.Fatalf("sweeper.New: %v", err)
	}
	h.s = s
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sweeper logs:\n%s", h.logs.String())
		}
	})
	return h
}

// handle runs the sweeper on recs and returns the failed sequence numbers.
func (h sweepHarness) handle(t *testing.T, recs ...events.DynamoDBEventRecord) []string {
	t.Helper()
	resp, err := h.s.Handle(t.Context(), events.DynamoDBEvent{Records: recs})
	if err != nil {
		t.Fatalf("Handle() error = %v, want nil (failures are reported per record)", err)
	}
	return lambdatest.Failures(resp)
}

// reservation is an IN_PROGRESS record as the middleware writes it.
func sweptReservation(key idempotency.Key, external bool, created, deadline time.Time) idempotency.Record {
	rec := idempotency.Record{
		Key:         key,
		Status:      idempotency.StatusInProgress,
		Route:       route,
		Fingerprint: "f1e2d3c4b5a6",
		External:    external,
		LeaseToken:  idempotency.NewToken(),
		ExpiresAt:   deadline,
		CreatedAt:   created,
		UpdatedAt:   created,
	}
	if external {
		rec.Request = []byte(`{"amount":1999,"currency":"usd","customer":"cus_1","source":"tok_visa"}`)
	}
	return rec
}

func TestSweeper(t *testing.T) {
	e := newSweepEnv(t)
	tests := []struct {
		name     string
		external bool
		lease    time.Duration // lease deadline relative to the removal
		identity *events.DynamoDBUserIdentity
		release  bool // removed by Store.Release rather than by TTL
		newer    bool // a newer request reserves the key after the removal
		twice    bool // the stream delivers the record twice
		want     idempotency.Status
		metrics  map[string]int
	}{
		{
			name: "external, TTL deletion with its user identity: restored UNKNOWN", external: true,
			lease: -3 * time.Second, identity: lambdatest.TTLIdentity(),
			want: idempotency.StatusUnknown, metrics: map[string]int{"zombie_swept": 1, "reconcile_scheduled": 1},
		},
		{
			name: "external, TTL deletion without user identity (LocalStack): restored UNKNOWN", external: true,
			lease: -2 * time.Second,
			want:  idempotency.StatusUnknown, metrics: map[string]int{"zombie_swept": 1, "reconcile_scheduled": 1},
		},
		{
			name: "external, release within the lease: ignored", external: true,
			lease: 30 * time.Second, release: true,
			metrics: map[string]int{},
		},
		{
			name:  "not external, TTL deletion: swept, nothing restored",
			lease: -3 * time.Second, identity: lambdatest.TTLIdentity(),
			metrics: map[string]int{"zombie_swept": 1},
		},
		{
			name:    "not external, TTL deletion without user identity: swept",
			lease:   -2 * time.Second,
			metrics: map[string]int{"zombie_swept": 1},
		},
		{
			name:  "not external, release within the lease: ignored",
			lease: 30 * time.Second, release: true,
			metrics: map[string]int{},
		},
		{
			// A new reservation (a retry of the same request: the same
			// fingerprint, created later) took the key in the gap and runs
			// the request again, while what the abandoned one did at the
			// other system is unknown: alarmed.
			name: "external, newer owner: not overwritten, alarmed", external: true,
			lease: -3 * time.Second, identity: lambdatest.TTLIdentity(), newer: true,
			want: idempotency.StatusInProgress, metrics: map[string]int{"zombie_swept": 1, "zombie_unrestored": 1},
		},
		{
			name: "external, redelivered: restored once", external: true,
			lease: -3 * time.Second, identity: lambdatest.TTLIdentity(), twice: true,
			want: idempotency.StatusUnknown, metrics: map[string]int{"zombie_swept": 2, "reconcile_scheduled": 1},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := idempotency.NewKey("acme", "sweeper-case-"+string(rune('a'+i)))
			removed := time.Now()
			old := sweptReservation(key, tt.external, removed.Add(-time.Minute), removed.Add(tt.lease))
			if err := e.store.Reserve(t.Context(), old, nil, removed.Add(-time.Minute)); err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			item := e.image(t, key)
			if tt.release {
				if err := e.store.Release(t.Context(), key, old.LeaseToken, nil); err != nil {
					t.Fatalf("Release: %v", err)
				}
			} else {
				e.expire(t, key)
			}
			var newer idempotency.Record
			if tt.newer {
				newer = sweptReservation(key, true, removed, removed.Add(30*time.Second))
				if err := e.store.Reserve(t.Context(), newer, nil, removed); err != nil {
					t.Fatalf("Reserve(newer): %v", err)
				}
			}
			rec := lambdatest.Record(events.DynamoDBOperationTypeRemove, item, nil, tt.identity, removed)

			now := time.Now()
			h := newSweepHarness(t, e.store, func() time.Time { return now })
			if failed := h.handle(t, rec); failed != nil {
				t.Fatalf("Handle() failures = %v, want none", failed)
			}
			var first idempotency.Record
			if tt.twice {
				first, _ = e.store.Get(t.Context(), key)
				if failed := h.handle(t, rec); failed != nil {
					t.Fatalf("Handle() again: failures = %v, want none", failed)
				}
			}

			got, err := e.store.Get(t.Context(), key)
			switch {
			case tt.want == "":
				if !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("Get() = %+v, %v; want ErrNotFound (nothing restored)", got, err)
				}
			case err != nil:
				t.Fatalf("Get() = %v, want a %s record", err, tt.want)
			case tt.newer:
				if got.LeaseToken != newer.LeaseToken || got.Status != idempotency.StatusInProgress {
					t.Errorf("Get() = %s under lease %q, want the newer owner's IN_PROGRESS under %q", got.Status, got.LeaseToken, newer.LeaseToken)
				}
			default:
				want := idempotency.Record{
					Key:          key,
					Status:       idempotency.StatusUnknown,
					Route:        route,
					Fingerprint:  old.Fingerprint,
					External:     true,
					LeaseToken:   got.LeaseToken,
					ExpiresAt:    now.Add(retention).Truncate(time.Millisecond).UTC(),
					Request:      old.Request,
					CreatedAt:    old.CreatedAt.Truncate(time.Millisecond).UTC(),
					UpdatedAt:    now.Truncate(time.Millisecond).UTC(),
					UnknownSince: now.Truncate(time.Millisecond).UTC(), // UNKNOWN from the restore on
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("restored record mismatch (-want +got):\n%s", diff)
				}
				if got.LeaseToken == "" || got.LeaseToken == old.LeaseToken {
					t.Errorf("restored lease token = %q, want a fresh one (old %q)", got.LeaseToken, old.LeaseToken)
				}
				if tt.twice && got.LeaseToken != first.LeaseToken {
					t.Errorf("after redelivery lease token = %q, want the first restore's %q", got.LeaseToken, first.LeaseToken)
				}
			}
			if diff := cmp.Diff(tt.metrics, lambdatest.Counts(t, h.metrics.String(), "sweeper")); diff != "" {
				t.Errorf("metrics mismatch (-want +got):\n%s", diff)
			}
			logs := h.logs.String()
			if strings.Contains(logs, key.Hash) {
				t.Errorf("logs hold the full key hash:\n%s", logs)
			}
			if tt.metrics["zombie_swept"] > 0 && !strings.Contains(logs, key.Short()) {
				t.Errorf("logs do not name the key by its short hash %s:\n%s", key.Short(), logs)
			}
		})
	}
}

// TestSweeperIgnores checks that records other than REMOVEs of IN_PROGRESS
// records are left alone, whatever their timing.
func TestSweeperIgnores(t *testing.T) {
	e := newSweepEnv(t)
	key := idempotency.NewKey("acme", "ignored")
	past := time.Now().Add(-time.Hour)
	inProgress := sweptReservation(key, true, past, past.Add(time.Second))
	if err := e.store.Reserve(t.Context(), inProgress, nil, past); err != nil {
		t.Fatal(err)
	}
	reserved := e.image(t, key)
	if err := e.store.MarkUnknown(t.Context(), key, inProgress.LeaseToken, idempotency.NewToken(), past.Add(2*time.Second), past); err != nil {
		t.Fatal(err)
	}
	unknown := e.image(t, key)
	e.expire(t, key)
	completed := stream.FromSDK(dynamo.ItemFromRecord(idempotency.Record{
		Key: key, Status: idempotency.StatusCompleted, Route: route, Fingerprint: "f", External: true,
		ExpiresAt: past.Add(time.Second), Response: &idempotency.Response{Status: 201, Body: []byte("{}")},
	}))
	// An item that does not decode (no lease deadline), deleted by an
	// operator with aws dynamodb delete-item, as the README's runbook for
	// an unreadable item says: no TTL identity.
	undecodable := stream.FromSDK(dynamo.ItemFromRecord(sweptReservation(idempotency.NewKey("acme", "unreadable"), true, past, past.Add(time.Second))))
	delete(undecodable, dynamo.AttrExpiresAtMS)
	now := time.Now()
	tests := []struct {
		name string
		rec  events.DynamoDBEventRecord
	}{
		{"INSERT IN_PROGRESS", lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, reserved, nil, now)},
		{"REMOVE of an undecodable IN_PROGRESS item without the TTL identity (an operator's delete-item)",
			lambdatest.Record(events.DynamoDBOperationTypeRemove, undecodable, nil, nil, now)},
		{"MODIFY IN_PROGRESS -> UNKNOWN", lambdatest.Record(events.DynamoDBOperationTypeModify, reserved, unknown, nil, now)},
		{"REMOVE UNKNOWN without the TTL identity (the reconciler's release)", lambdatest.Record(events.DynamoDBOperationTypeRemove, unknown, nil, nil, now)},
		{"REMOVE COMPLETED by TTL", lambdatest.Record(events.DynamoDBOperationTypeRemove, completed, nil, lambdatest.TTLIdentity(), now)},
		{"REMOVE without an old image", lambdatest.Record(events.DynamoDBOperationTypeRemove, nil, nil, lambdatest.TTLIdentity(), now)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newSweepHarness(t, e.store, time.Now)
			if failed := h.handle(t, tt.rec); failed != nil {
				t.Errorf("Handle() failures = %v, want none", failed)
			}
			if got, err := e.store.Get(t.Context(), key); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("Get() = %+v, %v; want ErrNotFound", got, err)
			}
			if got := lambdatest.Counts(t, h.metrics.String(), "sweeper"); len(got) != 0 {
				t.Errorf("metrics = %v, want none", got)
			}
		})
	}
}

// TestSweeperRestoresExpiredUnknown checks that an UNKNOWN record deleted by
// TTL before it was resolved (the reconciler's retries exhausted, nobody
// retried or re-announced it within its retention) is restored as UNKNOWN
// for the reconciler, rather than left deleted: its outcome is still
// unknown, and what its reservation held (a refund's hold on the payment)
// would otherwise stay held with nothing left to resolve it, while a retry
// ran the request again.
//
// Between the deletion and the restore (seconds) a new request may take the
// key and call the other system again: the restore then meets its record
// (a reservation, or its completion) and counts zombie_unrestored, with an
// Error line, since the request may have run twice. A redelivered REMOVE
// that meets its own earlier restore, whatever the reconciler or a retry
// did with it since (a redrive, a completion), counts nothing.
func TestSweeperRestoresExpiredUnknown(t *testing.T) {
	e := newSweepEnv(t)
	tests := []struct {
		name      string
		newer     bool // a newer request reserves the key after the removal
		newerDone bool // and completes
		twice     bool // the stream delivers the record twice
		// since changes the first restore before the second delivery, as
		// the request continues.
		since   func(t *testing.T, restored idempotency.Record)
		want    idempotency.Status
		metrics map[string]int
	}{
		{name: "restored", want: idempotency.StatusUnknown, metrics: map[string]int{"reconcile_scheduled": 1}},
		{name: "redelivered: restored once", twice: true, want: idempotency.StatusUnknown, metrics: map[string]int{"reconcile_scheduled": 1}},
		{
			name: "newer owner: not overwritten, alarmed", newer: true,
			want: idempotency.StatusInProgress, metrics: map[string]int{"zombie_unrestored": 1},
		},
		{
			name: "newer owner completed: not overwritten, alarmed", newer: true, newerDone: true,
			want: idempotency.StatusCompleted, metrics: map[string]int{"zombie_unrestored": 1},
		},
		{
			name: "redelivered after a retry redrove the restore: left alone", twice: true,
			since: func(t *testing.T, restored idempotency.Record) {
				at := time.Now()
				if err := e.store.MarkUnknown(t.Context(), restored.Key, restored.LeaseToken, idempotency.NewToken(), at.Add(retention), at); err != nil {
					t.Fatalf("MarkUnknown(redrive): %v", err)
				}
			},
			want: idempotency.StatusUnknown, metrics: map[string]int{"reconcile_scheduled": 1},
		},
		{
			name: "redelivered after the reconciler completed the restore: left alone", twice: true,
			since: func(t *testing.T, restored idempotency.Record) {
				done := restored
				done.Status, done.Request = idempotency.StatusCompleted, nil
				done.Response = &idempotency.Response{Status: 201, Body: []byte(`{"reconciled":true}`)}
				if err := e.store.Complete(t.Context(), done, restored.LeaseToken, nil); err != nil {
					t.Fatalf("Complete(reconciled): %v", err)
				}
			},
			want: idempotency.StatusCompleted, metrics: map[string]int{"reconcile_scheduled": 1},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := idempotency.NewKey("acme", "expired-unknown-"+string(rune('a'+i)))
			removed := time.Now()
			// Recent enough that the record's TTL attribute (a day past
			// its lease, then past its UNKNOWN expiry) is in the future:
			// DynamoDB Local's TTL would otherwise delete it before the
			// test does (e.expire), between its writes and its reads.
			created := removed.Add(-time.Hour)
			res := sweptReservation(key, true, created, created.Add(30*time.Second))
			res.Point, res.Data = "order_created", map[string]string{"order": "ord_1"}
			if err := e.store.Reserve(t.Context(), res, nil, created); err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			unknownAt := created.Add(31 * time.Second)
			if err := e.store.MarkUnknown(t.Context(), key, res.LeaseToken, idempotency.NewToken(), unknownAt.Add(24*time.Hour), unknownAt); err != nil {
				t.Fatalf("MarkUnknown: %v", err)
			}
			old, err := e.store.Get(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			item := e.image(t, key)
			e.expire(t, key)
			var newer idempotency.Record
			if tt.newer {
				newer = sweptReservation(key, true, removed, removed.Add(30*time.Second))
				if err := e.store.Reserve(t.Context(), newer, nil, removed); err != nil {
					t.Fatalf("Reserve(newer): %v", err)
				}
				if tt.newerDone {
					done := newer
					done.Status, done.Request = idempotency.StatusCompleted, nil
					done.Response = &idempotency.Response{Status: 201, Body: []byte(`{"newer":true}`)}
					if err := e.store.Complete(t.Context(), done, newer.LeaseToken, nil); err != nil {
						t.Fatalf("Complete(newer): %v", err)
					}
				}
				if newer, err = e.store.Get(t.Context(), key); err != nil {
					t.Fatal(err)
				}
			}
			rec := lambdatest.Record(events.DynamoDBOperationTypeRemove, item, nil, lambdatest.TTLIdentity(), removed)

			now := time.Now()
			h := newSweepHarness(t, e.store, func() time.Time { return now })
			if failed := h.handle(t, rec); failed != nil {
				t.Fatalf("Handle() failures = %v, want none", failed)
			}
			first, _ := e.store.Get(t.Context(), key)
			var since idempotency.Record
			if tt.since != nil {
				tt.since(t, first)
				if since, err = e.store.Get(t.Context(), key); err != nil {
					t.Fatal(err)
				}
			}
			if tt.twice {
				if failed := h.handle(t, rec); failed != nil {
					t.Fatalf("Handle() again: failures = %v, want none", failed)
				}
			}
			got, err := e.store.Get(t.Context(), key)
			logs := h.logs.String()
			switch {
			case err != nil:
				t.Fatalf("Get() = %v, want a %s record", err, tt.want)
			case tt.newer:
				if !cmp.Equal(newer, got) {
					t.Errorf("Get() = %+v, want the newer owner's record unchanged: %+v", got, newer)
				}
				if !strings.Contains(logs, `"level":"ERROR"`) || !strings.Contains(logs, key.Short()) {
					t.Errorf("no Error line naming the record %s:\n%s", key.Short(), logs)
				}
			case tt.since != nil:
				if !cmp.Equal(since, got) || got.Status != tt.want {
					t.Errorf("Get() = %+v, want the continued restore unchanged: %+v", got, since)
				}
				if strings.Contains(logs, `"level":"ERROR"`) {
					t.Errorf("an Error line for a restore meeting its own continuation:\n%s", logs)
				}
			default:
				want := old // UnknownSince too: when it first went UNKNOWN, before its deletion
				want.LeaseToken = got.LeaseToken
				want.ExpiresAt = now.Add(retention).Truncate(time.Millisecond).UTC()
				want.UpdatedAt = now.Truncate(time.Millisecond).UTC()
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("restored record mismatch (-want +got):\n%s", diff)
				}
				if got.LeaseToken == "" || got.LeaseToken == old.LeaseToken {
					t.Errorf("restored lease token = %q, want a fresh one (old %q)", got.LeaseToken, old.LeaseToken)
				}
				if got.LeaseToken != first.LeaseToken {
					t.Errorf("after redelivery lease token = %q, want the first restore's %q", got.LeaseToken, first.LeaseToken)
				}
			}
			if diff := cmp.Diff(tt.metrics, lambdatest.Counts(t, h.metrics.String(), "sweeper")); diff != "" {
				t.Errorf("metrics mismatch (-want +got):\n%s", diff)
			}
			if strings.Contains(logs, key.Hash) {
				t.Errorf("logs hold the full key hash:\n%s", logs)
			}
		})
	}
}

// TestSweeperFailures checks that a record that cannot be handled fails,
// with every later record of its batch, and that nothing after it is
// applied.
func TestSweeperFailures(t *testing.T) {
	e := newSweepEnv(t)
	now := time.Now()
	abandoned := func(t *testing.T, raw string) (idempotency.Key, events.DynamoDBEventRecord) {
		key := idempotency.NewKey("acme", raw)
		old := sweptReservation(key, true, now.Add(-time.Minute), now.Add(-5*time.Second))
		if err := e.store.Reserve(t.Context(), old, nil, now.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		item := e.image(t, key)
		e.expire(t, key)
		return key, lambdatest.Record(events.DynamoDBOperationTypeRemove, item, nil, lambdatest.TTLIdentity(), now)
	}
	badImage := func(mutate func(map[string]events.DynamoDBAttributeValue)) events.DynamoDBEventRecord {
		key := idempotency.NewKey("acme", "bad")
		img := stream.FromSDK(dynamo.ItemFromRecord(sweptReservation(key, true, now, now.Add(-time.Second))))
		mutate(img)
		return lambdatest.Record(events.DynamoDBOperationTypeRemove, img, nil, lambdatest.TTLIdentity(), now)
	}

	tests := []struct {
		name  string
		store func() recovery.Reserver   // when set, the bad record is a valid one this store fails
		bad   events.DynamoDBEventRecord // otherwise, an undecodable record
	}{
		{name: "malformed partition key", bad: badImage(func(m map[string]events.DynamoDBAttributeValue) {
			m[dynamo.AttrPK] = events.NewStringAttribute("no-tenant-separator")
		})},
		{name: "missing lease deadline", bad: badImage(func(m map[string]events.DynamoDBAttributeValue) {
			delete(m, dynamo.AttrExpiresAtMS)
		})},
		{name: "lease deadline of the wrong type", bad: badImage(func(m map[string]events.DynamoDBAttributeValue) {
			m[dynamo.AttrExpiresAtMS] = events.NewStringAttribute("soon")
		})},
		// An emulator's TTL deletion carries no identity (LocalStack's): an
		// item whose TTL attribute had passed may be TTL's, so it is not
		// ignored as an operator's delete-item would be.
		{name: "missing lease deadline, removed without the identity past its TTL attribute", bad: withoutIdentity(badImage(func(m map[string]events.DynamoDBAttributeValue) {
			delete(m, dynamo.AttrExpiresAtMS)
			m[dynamo.AttrExpiresAt] = events.NewNumberAttribute(strconv.FormatInt(now.Add(-10*time.Second).Unix(), 10))
		}))},
		{name: "store write fails (missing table)", store: func() recovery.Reserver { return dynamo.New(e.db, e.names.ByLogicalID["IdempotencyTable"]+"-missing") }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := recovery.Reserver(e.store)
			if tt.store != nil {
				store = tt.store()
			}
			_, ignored := abandoned(t, "failures-before-"+string(rune('a'+i)))
			bad := tt.bad
			if tt.store != nil {
				_, bad = abandoned(t, "failures-bad-"+string(rune('a'+i)))
			}
			afterKey, after := abandoned(t, "failures-after-"+string(rune('a'+i)))
			ignored.EventName = string(events.DynamoDBOperationTypeInsert)

			h := newSweepHarness(t, store, time.Now)
			failed := h.handle(t, ignored, bad, after)
			want := []string{bad.Change.SequenceNumber, after.Change.SequenceNumber}
			if diff := cmp.Diff(want, failed); diff != "" {
				t.Errorf("batch item failures mismatch (-want +got):\n%s", diff)
			}
			if got, err := e.store.Get(t.Context(), afterKey); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record after the failure: Get() = %+v, %v; want ErrNotFound (not applied before the failed record)", got, err)
			}
			if got := lambdatest.Counts(t, h.metrics.String(), "sweeper"); len(got) != 0 {
				t.Errorf("metrics = %v, want none", got)
			}
		})
	}
}

func TestRemovedByTTL(t *testing.T) {
	deadline := time.Date(2026, 1, 1, 0, 0, 10, 250e6, time.UTC) // expires_at = ...:11
	whole := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)        // expires_at = ...:10
	at := func(d time.Duration) time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(d) }
	other := &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "example.amazonaws.com"}
	tests := []struct {
		name     string
		deadline time.Time
		identity *events.DynamoDBUserIdentity
		removed  time.Time // ApproximateCreationDateTime, zero when absent
		now      time.Time
		want     bool
	}{
		{"TTL identity, whatever the time", deadline, lambdatest.TTLIdentity(), at(time.Second), at(time.Second), true},
		{"no identity, the second after the deadline", deadline, nil, at(11 * time.Second), at(time.Minute), true},
		{"no identity, well after the deadline", deadline, nil, at(time.Hour), at(time.Hour), true},
		{"no identity, within the lease", deadline, nil, at(9 * time.Second), at(time.Minute), false},
		{"no identity, in the deadline's second (seconds precision)", deadline, nil, at(10 * time.Second), at(time.Minute), false},
		{"no identity, in the deadline's second, after it (TTL cannot have run)", deadline, nil, at(10*time.Second + 900*time.Millisecond), at(time.Minute), false},
		{"no identity, at a whole-second deadline", whole, nil, at(10 * time.Second), at(time.Minute), true},
		{"no identity, just before a whole-second deadline", whole, nil, at(10*time.Second - time.Millisecond), at(time.Minute), false},
		{"another identity, within the lease", deadline, other, at(5 * time.Second), at(time.Minute), false},
		{"no creation time, handled after the deadline", deadline, nil, time.Time{}, at(11 * time.Second), true},
		{"no creation time, handled within the lease", deadline, nil, time.Time{}, at(5 * time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := events.DynamoDBEventRecord{
				EventName:    string(events.DynamoDBOperationTypeRemove),
				Change:       events.DynamoDBStreamRecord{ApproximateCreationDateTime: events.SecondsEpochTime{Time: tt.removed}},
				UserIdentity: tt.identity,
			}
			old := idempotency.Record{Status: idempotency.StatusInProgress, ExpiresAt: tt.deadline}
			if got := recovery.RemovedByTTL(rec, old, tt.now); got != tt.want {
				t.Errorf("RemovedByTTL(removed %v, deadline %v) = %v, want %v", tt.removed, tt.deadline, got, tt.want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	for _, tt := range []struct {
		name  string
		store recovery.Reserver
	}{
		{"no store", nil},
		{"a nil store pointer", (*memory.Store)(nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := recovery.NewSweeper(recovery.SweeperConfig{Store: tt.store}); err == nil || !strings.Contains(err.Error(), "Store") {
				t.Errorf("NewSweeper(%s) = %v, want an error naming Store", tt.name, err)
			}
		})
	}
}

// TestSweeperRestoresCarriedData: an UNKNOWN record whose recovery point
// carries more data than dynamo.MaxData (written before the bound, or by
// another writer: data a record holds is carried forward, never checked
// again) is restored when TTL deletes it, as any other: refused, it would
// fail at every delivery and its outcome, and its holds, would be dropped
// with the stream record.
func TestSweeperRestoresCarriedData(t *testing.T) {
	e := newSweepEnv(t)
	key := idempotency.NewKey("acme", "carried-data")
	removed := time.Now()
	created := removed.Add(-time.Hour) // its TTL in the future: deleted by the test only
	old := sweptReservation(key, true, created, created.Add(30*time.Second))
	old.Status, old.ExpiresAt = idempotency.StatusUnknown, created.Add(24*time.Hour)
	old.Point, old.Data = "charged", map[string]string{"charge": "ch_1", "legacy": strings.Repeat("x", dynamo.MaxData+1)}
	old.CreatedAt, old.UpdatedAt = old.CreatedAt.Truncate(time.Millisecond).UTC(), old.UpdatedAt.Truncate(time.Millisecond).UTC()
	old.ExpiresAt = old.ExpiresAt.Truncate(time.Millisecond).UTC()
	if _, err := e.db.PutItem(t.Context(), &dynamodb.PutItemInput{
		TableName: aws.String(e.names.ByLogicalID["IdempotencyTable"]), Item: dynamo.ItemFromRecord(old),
	}); err != nil {
		t.Fatal(err)
	}
	item := e.image(t, key)
	e.expire(t, key)
	rec := lambdatest.Record(events.DynamoDBOperationTypeRemove, item, nil, lambdatest.TTLIdentity(), removed)

	now := time.Now()
	h := newSweepHarness(t, e.store, func() time.Time { return now })
	if failed := h.handle(t, rec); failed != nil {
		t.Fatalf("Handle() failures = %v, want none", failed)
	}
	got, err := e.store.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get() = %v, want the restored UNKNOWN record", err)
	}
	want := old
	want.LeaseToken = got.LeaseToken
	want.ExpiresAt = now.Add(retention).Truncate(time.Millisecond).UTC()
	want.UpdatedAt = now.Truncate(time.Millisecond).UTC()
	want.UnknownSince = want.UpdatedAt // written UNKNOWN without it: UNKNOWN from the restore on
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("restored record mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"reconcile_scheduled": 1}, lambdatest.Counts(t, h.metrics.String(), "sweeper")); diff != "" {
		t.Errorf("metrics mismatch (-want +got):\n%s", diff)
	}
}

// withoutIdentity returns rec without its user identity, as an emulator's
// TTL deletion (or an operator's delete) carries none.
func withoutIdentity(rec events.DynamoDBEventRecord) events.DynamoDBEventRecord {
	rec.UserIdentity = nil
	return rec
}
