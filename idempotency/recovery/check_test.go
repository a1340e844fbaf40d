package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/recovery/sqsqueue"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/sqstest"
)

// checkEnv is one test's tables and a check queue on a local SQS endpoint.
type checkEnv struct {
	sweepEnv
	sqs *sqs.Client
	url string
	q   *sqsqueue.Queue
}

func newCheckEnv(t *testing.T) checkEnv {
	t.Helper()
	c := sqstest.Client(t, sqstest.Endpoint(t))
	url := sqstest.Queue(t, c, "check", nil)
	return checkEnv{sweepEnv: newSweepEnv(t), sqs: c, url: url, q: sqstest.Sender(t, c, url)}
}

// checks receives the checks on the queue, waiting up to wait for the first.
func (e checkEnv) checks(t *testing.T, wait time.Duration) []recovery.Check {
	t.Helper()
	var out []recovery.Check
	for _, m := range sqstest.Receive(t, e.sqs, e.url, wait, false) {
		c, err := recovery.DecodeCheck(aws.ToString(m.Body))
		if err != nil {
			t.Fatalf("message %s: %v", aws.ToString(m.Body), err)
		}
		out = append(out, c)
	}
	return out
}

// checkHarness is a Scheduler or Checker's metrics and logs.
type checkHarness struct {
	metrics, logs *lambdatest.Buffer
}

func newCheckHarness(t *testing.T) checkHarness {
	t.Helper()
	h := checkHarness{metrics: &lambdatest.Buffer{}, logs: &lambdatest.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", h.logs.String())
		}
	})
	return h
}

func (h checkHarness) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (h checkHarness) counter(service string) recovery.Counter {
	return metrics.New(h.metrics, "once", map[string]string{"Service": service})
}

func TestScheduler(t *testing.T) {
	e := newCheckEnv(t)
	now := time.Now()
	reserve := func(t *testing.T, raw string, lease time.Duration) (idempotency.Record, map[string]events.DynamoDBAttributeValue) {
		t.Helper()
		rec := sweptReservation(idempotency.NewKey("acme", raw), true, now, now.Add(lease))
		if err := e.store.Reserve(t.Context(), rec, nil, now); err != nil {
			t.Fatal(err)
		}
		return rec, e.image(t, rec.Key)
	}
	image := func(rec idempotency.Record) map[string]events.DynamoDBAttributeValue {
		return stream.FromSDK(dynamo.ItemFromRecord(rec))
	}
	fresh, freshImg := reserve(t, "fresh", 2*time.Second)
	long, longImg := reserve(t, "long", time.Hour)
	completed := fresh
	completed.Status, completed.ExpiresAt, completed.Response = idempotency.StatusCompleted, now.Add(-time.Second), &idempotency.Response{Status: 201}
	// An UNKNOWN record's check is due at its expiry (the retention from
	// its last change; short here, to see the check delivered).
	unknown := fresh
	unknown.Status, unknown.LeaseToken = idempotency.StatusUnknown, idempotency.NewToken()
	redriven := unknown
	redriven.LeaseToken, redriven.ExpiresAt = idempotency.NewToken(), now.Add(3*time.Second)
	advanced := unknown
	advanced.UpdatedAt, advanced.Point = now.Add(time.Second), "charged" // a Resolver's Advance, under the same lease
	extended := fresh
	extended.UpdatedAt = now.Add(time.Second) // another attribute changes, under the same lease

	tests := []struct {
		name string
		rec  events.DynamoDBEventRecord
		want *idempotency.Record // the reservation whose check is sent
	}{
		{"INSERT of a reservation", lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, freshImg, nil, now), &fresh},
		{"MODIFY: an expired record reclaimed", lambdatest.Record(events.DynamoDBOperationTypeModify, image(completed), freshImg, nil, now), &fresh},
		{"MODIFY under the same lease", lambdatest.Record(events.DynamoDBOperationTypeModify, freshImg, image(extended), nil, now), nil},
		{"MODIFY to UNKNOWN: checked at its expiry", lambdatest.Record(events.DynamoDBOperationTypeModify, freshImg, image(unknown), nil, now), &unknown},
		{"INSERT UNKNOWN (a sweeper's restore)", lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, image(unknown), nil, now), &unknown},
		{"MODIFY UNKNOWN redriven (a new lease token)", lambdatest.Record(events.DynamoDBOperationTypeModify, image(unknown), image(redriven), nil, now), &redriven},
		{"MODIFY UNKNOWN under the same lease and expiry", lambdatest.Record(events.DynamoDBOperationTypeModify, image(unknown), image(advanced), nil, now), nil},
		{"MODIFY to COMPLETED", lambdatest.Record(events.DynamoDBOperationTypeModify, freshImg, image(completed), nil, now), nil},
		{"REMOVE of a reservation", lambdatest.Record(events.DynamoDBOperationTypeRemove, freshImg, nil, nil, now), nil},
		{"a lease longer than the queue's delay", lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, longImg, nil, now), &long},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newCheckHarness(t)
			s, err := recovery.NewScheduler(recovery.SchedulerConfig{
				Queue: e.q, Logger: h.logger(), Metrics: h.counter("scheduler"), Now: func() time.Time { return now },
			})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.Handle(t.Context(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{tt.rec}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
			}
			_, _, delayed := sqstest.Counts(t, e.sqs, e.url)
			if tt.want == nil {
				if delayed != "0" || len(e.checks(t, 0)) != 0 {
					t.Errorf("checks sent: %s delayed, want none", delayed)
				}
				if got := lambdatest.Counts(t, h.metrics.String(), "scheduler"); len(got) != 0 {
					t.Errorf("metrics = %v, want none", got)
				}
				return
			}
			if delayed != "1" {
				t.Fatalf("delayed messages = %s, want the check, delayed until the lease runs out", delayed)
			}
			if tt.want == &long {
				// Sent with SQS's longest delay; the checker sends it on.
				if got := e.checks(t, 2*time.Second); len(got) != 0 {
					t.Errorf("the check of a 1h lease arrived after 2s: %+v", got)
				}
				if _, err := e.sqs.PurgeQueue(t.Context(), &sqs.PurgeQueueInput{QueueUrl: aws.String(e.url)}); err != nil {
					t.Fatal(err)
				}
			} else {
				if got := e.checks(t, 0); len(got) != 0 {
					t.Fatalf("check delivered at once: %+v; want it after the lease", got)
				}
				got := e.checks(t, 5*time.Second)
				want := []recovery.Check{{Record: tt.want.Key.ID(), Route: route, LeaseToken: tt.want.LeaseToken, Deadline: tt.want.ExpiresAt.Truncate(time.Millisecond)}}
				if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
					t.Errorf("checks mismatch (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(map[string]int{"check_scheduled": 1}, lambdatest.Counts(t, h.metrics.String(), "scheduler")); diff != "" {
				t.Errorf("metrics mismatch (-want +got):\n%s", diff)
			}
			if strings.Contains(h.logs.String(), tt.want.Key.Hash) {
				t.Errorf("logs hold the full key hash")
			}
		})
	}
}

// TestSchedulerFailures checks that the first record whose check is not
// sent fails with every later one of its batch.
func TestSchedulerFailures(t *testing.T) {
	e := newCheckEnv(t)
	now := time.Now()
	img := func(raw string) map[string]events.DynamoDBAttributeValue {
		return stream.FromSDK(dynamo.ItemFromRecord(sweptReservation(idempotency.NewKey("acme", raw), true, now, now.Add(time.Minute))))
	}
	bad := img("bad")
	delete(bad, dynamo.AttrExpiresAtMS)
	recs := []events.DynamoDBEventRecord{
		lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, img("a"), nil, now),
		lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, bad, nil, now),
		lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, img("b"), nil, now),
	}
	for _, tt := range []struct {
		name  string
		queue recovery.Queue
		from  int // the first failed record
	}{
		{"undecodable image", e.q, 1},
		{"queue unavailable", sqstest.Sender(t, e.sqs, e.url+"-missing"), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newCheckHarness(t)
			s, err := recovery.NewScheduler(recovery.SchedulerConfig{Queue: tt.queue, Logger: h.logger(), Metrics: h.counter("scheduler")})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.Handle(t.Context(), events.DynamoDBEvent{Records: recs})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, r := range recs[tt.from:] {
				want = append(want, r.Change.SequenceNumber)
			}
			if diff := cmp.Diff(want, lambdatest.Failures(resp)); diff != "" {
				t.Errorf("batch item failures mismatch (-want +got):\n%s", diff)
			}
			if n := lambdatest.Counts(t, h.metrics.String(), "scheduler")["check_failed"]; n == 0 {
				t.Errorf("check_failed = 0, want the failure counted")
			}
		})
	}
}

func TestChecker(t *testing.T) {
	e := newCheckEnv(t)
	const retention = 24 * time.Hour
	tests := []struct {
		name     string
		external bool
		unknown  bool                                              // the record is UNKNOWN, expiring at lease
		lease    time.Duration                                     // deadline (or expiry) relative to the check
		setup    func(t *testing.T, rec idempotency.Record) string // returns the lease token checked
		race     func(t *testing.T, rec idempotency.Record)        // writes between the checker's read and its write
		want     string                                            // "unknown", "released", "unchanged", "raced", "resent", "gone"
		metrics  map[string]int
	}{
		{name: "UNKNOWN at its expiry: handed to the reconciler again", external: true, unknown: true, lease: -time.Second,
			want: "unknown", metrics: map[string]int{"unknown_redriven": 1, "reconcile_scheduled": 1}},
		{name: "UNKNOWN before its expiry: sent on", external: true, unknown: true, lease: 2 * time.Second,
			want: "resent", metrics: map[string]int{"check_rescheduled": 1}},
		{name: "UNKNOWN redriven already (another lease token): nothing to do", external: true, unknown: true, lease: -time.Second,
			setup: func(t *testing.T, rec idempotency.Record) string {
				if err := e.store.MarkUnknown(t.Context(), rec.Key, rec.LeaseToken, idempotency.NewToken(), rec.ExpiresAt.Add(retention), rec.UpdatedAt.Add(time.Second)); err != nil {
					t.Fatal(err)
				}
				return rec.LeaseToken
			},
			want: "unchanged", metrics: map[string]int{}},
		{name: "UNKNOWN at its expiry, a racing redrive wins: nothing to do", external: true, unknown: true, lease: -time.Second,
			race: func(t *testing.T, rec idempotency.Record) {
				if err := e.store.MarkUnknown(t.Context(), rec.Key, rec.LeaseToken, idempotency.NewToken(), rec.ExpiresAt.Add(retention), rec.UpdatedAt.Add(time.Second)); err != nil {
					t.Error(err)
				}
			},
			want: "raced", metrics: map[string]int{}},
		{name: "UNKNOWN at its expiry, a racing completion wins: nothing to do", external: true, unknown: true, lease: -time.Second,
			race: func(t *testing.T, rec idempotency.Record) {
				done := rec
				done.Status, done.Response = idempotency.StatusCompleted, &idempotency.Response{Status: 201, Body: []byte("{}")}
				if err := e.store.Complete(t.Context(), done, rec.LeaseToken, nil); err != nil {
					t.Error(err)
				}
			},
			want: "raced", metrics: map[string]int{}},
		{name: "external, lease run out: UNKNOWN for the reconciler", external: true, lease: -time.Second,
			want: "unknown", metrics: map[string]int{"reservation_abandoned": 1, "reconcile_scheduled": 1}},
		{name: "leased, lease run out: released", lease: -time.Second,
			want: "released", metrics: map[string]int{"reservation_abandoned": 1}},
		{name: "lease still running: sent on", external: true, lease: 2 * time.Second,
			want: "resent", metrics: map[string]int{"check_rescheduled": 1}},
		{name: "another lease (reclaimed): nothing to do", external: true, lease: -time.Second,
			setup: func(*testing.T, idempotency.Record) string { return idempotency.NewToken() },
			want:  "unchanged", metrics: map[string]int{}},
		{name: "completed: nothing to do", external: true, lease: -time.Second,
			setup: func(t *testing.T, rec idempotency.Record) string {
				done := rec
				done.Status, done.Response = idempotency.StatusCompleted, &idempotency.Response{Status: 201, Body: []byte("{}")}
				if err := e.store.Complete(t.Context(), done, rec.LeaseToken, nil); err != nil {
					t.Fatal(err)
				}
				return rec.LeaseToken
			},
			want: "unchanged", metrics: map[string]int{}},
		{name: "released by its request: nothing to do", external: true, lease: -time.Second,
			setup: func(t *testing.T, rec idempotency.Record) string {
				if err := e.store.Release(t.Context(), rec.Key, rec.LeaseToken, nil); err != nil {
					t.Fatal(err)
				}
				return rec.LeaseToken
			},
			want: "gone", metrics: map[string]int{}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The checker's clock runs a minute ahead, so that a lease that
			// has run out for it is still running for DynamoDB Local's TTL,
			// which deletes a Leased reservation from its lease deadline
			// (within a second, locally) and would otherwise race the check.
			now := time.Now().Add(time.Minute)
			key := idempotency.NewKey("acme", fmt.Sprintf("checker-%d", i))
			rec := sweptReservation(key, tt.external, now.Add(-time.Minute), now.Add(tt.lease))
			if err := e.store.Reserve(t.Context(), rec, nil, rec.CreatedAt); err != nil {
				t.Fatal(err)
			}
			if tt.unknown {
				// Moved to UNKNOWN half a minute ago (by its check, a
				// retry's redrive, a sweeper's restore), expiring at lease.
				token, changed := idempotency.NewToken(), now.Add(-30*time.Second)
				if err := e.store.MarkUnknown(t.Context(), key, rec.LeaseToken, token, now.Add(tt.lease), changed); err != nil {
					t.Fatal(err)
				}
				rec.Status, rec.LeaseToken, rec.UpdatedAt, rec.UnknownSince = idempotency.StatusUnknown, token, changed, changed
			}
			lease := rec.LeaseToken
			if tt.setup != nil {
				lease = tt.setup(t, rec)
			}
			before, _ := e.store.Get(t.Context(), key)
			check := recovery.Check{Record: key.ID(), Route: route, LeaseToken: lease, Deadline: rec.ExpiresAt}
			store := &racingStore{CheckStore: e.store}
			var raced idempotency.Record
			if tt.race != nil {
				store.afterGet = func() {
					tt.race(t, rec)
					raced, _ = e.store.Get(t.Context(), key)
				}
			}
			h := newCheckHarness(t)
			c, err := recovery.NewChecker(recovery.CheckerConfig{
				Store: store, Queue: e.q, Retention: retention, Logger: h.logger(), Metrics: h.counter("checker"),
				Now: func() time.Time { return now },
			})
			if err != nil {
				t.Fatal(err)
			}
			ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: check.Encode()}}}
			// Delivered twice, as SQS may: the second delivery changes nothing.
			for range 2 {
				resp, err := c.Handle(t.Context(), ev)
				if err != nil || len(resp.BatchItemFailures) != 0 {
					t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
				}
			}
			got, err := e.store.Get(t.Context(), key)
			switch tt.want {
			case "unknown":
				want := rec
				want.Status, want.LeaseToken = idempotency.StatusUnknown, got.LeaseToken
				want.ExpiresAt, want.UpdatedAt = now.Add(retention), now
				if want.UnknownSince.IsZero() {
					want.UnknownSince = now // went UNKNOWN now; a redrive keeps when it first did
				}
				if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Sub(b).Abs() < time.Millisecond })); diff != "" {
					t.Errorf("record mismatch (-want +got):\n%s", diff)
				}
				if got.LeaseToken == rec.LeaseToken || got.LeaseToken == "" {
					t.Errorf("lease token = %q, want a new one", got.LeaseToken)
				}
			case "released", "gone":
				if !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("Get() = %s, %v; want ErrNotFound", got.Status, err)
				}
			case "unchanged":
				if err != nil || !cmp.Equal(before, got) {
					t.Errorf("Get() = %+v, %v; want it unchanged: %+v", got, err, before)
				}
			case "raced":
				if err != nil || raced.LeaseToken == "" || !cmp.Equal(raced, got) {
					t.Errorf("Get() = %+v, %v; want it as the racing write left it: %+v", got, err, raced)
				}
			case "resent":
				if err != nil || !cmp.Equal(before, got) {
					t.Errorf("Get() = %+v, %v; want it unchanged", got, err)
				}
				checks := e.checks(t, 5*time.Second)
				for len(checks) < 2 {
					more := e.checks(t, 2*time.Second)
					if len(more) == 0 {
						break
					}
					checks = append(checks, more...)
				}
				if len(checks) != 2 || checks[0] != checks[1] || checks[0].LeaseToken != rec.LeaseToken || !checks[0].Deadline.Equal(before.ExpiresAt) {
					t.Errorf("checks sent on = %+v, want two (one per delivery) of the record's lease and deadline", checks)
				}
			}
			wantMetrics := map[string]int{}
			for k, v := range tt.metrics {
				wantMetrics[k] = v
				if tt.want == "resent" {
					wantMetrics[k] = 2 * v
				}
			}
			if diff := cmp.Diff(wantMetrics, lambdatest.Counts(t, h.metrics.String(), "checker")); diff != "" {
				t.Errorf("metrics mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// racingStore is a CheckStore whose first Get runs afterGet once it has
// read the record: a write racing the Checker between its read and its
// fenced write.
type racingStore struct {
	recovery.CheckStore
	once     sync.Once
	afterGet func()
}

func (s *racingStore) Get(ctx context.Context, key idempotency.Key) (idempotency.Record, error) {
	rec, err := s.CheckStore.Get(ctx, key)
	if s.afterGet != nil {
		s.once.Do(s.afterGet)
	}
	return rec, err
}

// TestCheckerFailures checks that a message that cannot be acted on is a
// batch item failure, counted, and does not hold up the others.
func TestCheckerFailures(t *testing.T) {
	e := newCheckEnv(t)
	now := time.Now()
	key := idempotency.NewKey("acme", "checker-ok")
	rec := sweptReservation(key, true, now.Add(-time.Minute), now.Add(-time.Second))
	if err := e.store.Reserve(t.Context(), rec, nil, rec.CreatedAt); err != nil {
		t.Fatal(err)
	}
	good := recovery.NewCheck(rec).Encode()
	other := recovery.NewCheck(sweptReservation(idempotency.NewKey("acme", "checker-other"), true, now, now.Add(-time.Second))).Encode()
	tests := []struct {
		name  string
		store recovery.CheckStore
		body  string
	}{
		{"not JSON", e.store, "{"},
		{"no lease token", e.store, `{"record":"acme#abc","deadline":"2026-01-01T00:00:00Z"}`},
		{"malformed record ID", e.store, `{"record":"no-tenant","lease_token":"x","deadline":"2026-01-01T00:00:00Z"}`},
		{"store unavailable (missing table)", dynamo.New(e.db, e.names.ByLogicalID["IdempotencyTable"]+"-missing"), other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newCheckHarness(t)
			c, err := recovery.NewChecker(recovery.CheckerConfig{Store: tt.store, Queue: e.q, Logger: h.logger(), Metrics: h.counter("checker")})
			if err != nil {
				t.Fatal(err)
			}
			msgs := []events.SQSMessage{{MessageId: "bad", Body: tt.body}}
			if tt.store == recovery.CheckStore(e.store) {
				msgs = append(msgs, events.SQSMessage{MessageId: "good", Body: good})
			}
			resp, err := c.Handle(t.Context(), events.SQSEvent{Records: msgs})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]events.SQSBatchItemFailure{{ItemIdentifier: "bad"}}, resp.BatchItemFailures); diff != "" {
				t.Errorf("batch item failures mismatch (-want +got):\n%s", diff)
			}
			if n := lambdatest.Counts(t, h.metrics.String(), "checker")["check_failed"]; n != 1 {
				t.Errorf("check_failed = %d, want 1", n)
			}
		})
	}
	if got, err := e.store.Get(t.Context(), key); err != nil || got.Status != idempotency.StatusUnknown {
		t.Errorf("the good check's record = %s, %v; want UNKNOWN", got.Status, err)
	}
}

// TestNewSchedulerAndChecker: a missing store or queue is refused at
// construction, a typed nil one (an interface holding a nil pointer, such as
// a *sqsqueue.Queue whose sqsqueue.New failed) included, which would
// otherwise panic at its first use.
func TestNewSchedulerAndChecker(t *testing.T) {
	store := memory.New()
	queue, err := sqsqueue.New(&sqs.Client{}, "http://127.0.0.1:9324/000000000000/checks")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		store recovery.CheckStore
		queue recovery.Queue
		want  []string // what the errors name; none: no error
	}{
		{name: "both", store: store, queue: queue},
		{name: "neither", want: []string{"Store", "Queue"}},
		{name: "a nil *sqsqueue.Queue", store: store, queue: (*sqsqueue.Queue)(nil), want: []string{"Queue"}},
		{name: "a nil store pointer", store: (*memory.Store)(nil), queue: queue, want: []string{"Store"}},
	}
	check := func(t *testing.T, call string, err error, want []string) {
		t.Helper()
		if len(want) == 0 {
			if err != nil {
				t.Errorf("%s = %v, want no error", call, err)
			}
			return
		}
		for _, s := range want {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("%s = %v, want an error naming %s", call, err, s)
			}
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := recovery.NewChecker(recovery.CheckerConfig{Store: tt.store, Queue: tt.queue})
			check(t, "NewChecker", err, tt.want)
			var want []string
			if slices.Contains(tt.want, "Queue") {
				want = []string{"Queue"}
			}
			_, err = recovery.NewScheduler(recovery.SchedulerConfig{Queue: tt.queue})
			check(t, "NewScheduler", err, want)
		})
	}
}
