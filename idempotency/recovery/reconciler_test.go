package recovery_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
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
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
)

const (
	route           = "POST /v1/charges"
	retention       = time.Hour
	providerTimeout = time.Second
)

// chargeRequest is the request every test records and charges.
var chargeRequest = provider.ChargeRequest{Amount: 1999, Currency: "usd", Source: "tok_visa", Customer: "cus_1"}

// world is one test's DynamoDB Local tables and idempotency store, with the
// provider simulator served over HTTP.
type world struct {
	db       *dynamodb.Client
	names    dynamotest.Names
	store    *dynamo.Store
	provider *provider.Client
}

func newWorld(t *testing.T) world {
	t.Helper()
	w := world{db: dynamotest.Client(t)}
	w.names = dynamotest.Tables(t, w.db)
	w.store = dynamo.New(w.db, w.names.ByLogicalID["IdempotencyTable"])
	srv := httptest.NewServer(simulator.New(simulator.Options{DB: w.db, Table: w.names.ByLogicalID["ProviderTable"]}))
	t.Cleanup(srv.Close)
	w.provider = provider.New(srv.URL, &http.Client{Timeout: providerTimeout})
	return w
}

// image returns key's stored item as a stream image.
func (w world) image(t *testing.T, key idempotency.Key) map[string]events.DynamoDBAttributeValue {
	t.Helper()
	return stream.FromSDK(dynamotest.Item(t, w.db, w.names.ByLogicalID["IdempotencyTable"], key.ID()))
}

// charge makes the provider charge under key's forward key, with source
// deciding the outcome (tok_visa, tok_chargeDeclined).
func (w world) charge(t *testing.T, key idempotency.Key, source string) {
	t.Helper()
	req := chargeRequest
	req.Source = source
	_, err := w.provider.Charge(context.WithoutCancel(t.Context()), reservation(key, time.Time{}, 0).ForwardKey(), req)
	var declined *provider.DeclinedError
	if err != nil && !errors.As(err, &declined) {
		t.Errorf("provider Charge(%s, %s): %v", key.Short(), source, err)
	}
}

// rebuild is the tests' stand-in for httpapi.ChargeResponse: 201 with the
// charge and the recorded request, or 402 for a failed charge.
func rebuild(rec idempotency.Record, c provider.Charge) (idempotency.Response, error) {
	if len(rec.Request) == 0 {
		return idempotency.Response{}, errors.New("no recorded request")
	}
	status := http.StatusCreated
	if c.Status == provider.StatusFailed {
		status = http.StatusPaymentRequired
	}
	body, err := json.Marshal(map[string]any{
		"charge": c.ID, "status": c.Status, "failure_code": c.FailureCode, "request": json.RawMessage(rec.Request),
	})
	if err != nil {
		return idempotency.Response{}, err
	}
	return idempotency.Response{Status: status, Header: map[string]string{"Content-Type": "application/json"}, Body: body}, nil
}

// chargeResolver resolves the test route's records: it looks the charge up
// at p and rebuilds the answer with rebuild; no charge means nothing
// happened.
func chargeResolver(p *provider.Client, rebuild func(idempotency.Record, provider.Charge) (idempotency.Response, error)) idempotency.Resolver {
	return idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
		c, err := p.Lookup(ctx, rec.ForwardKey())
		switch {
		case errors.Is(err, provider.ErrNoCharge):
			return idempotency.Resolution{}, nil
		case err != nil:
			return idempotency.Resolution{}, err
		}
		resp, err := rebuild(rec, c)
		if err != nil {
			return idempotency.Resolution{}, err
		}
		return idempotency.Resolution{Response: &resp}, nil
	})
}

// config is what a test sets of a Reconciler's configuration.
type config struct {
	Store     recovery.Finisher
	Provider  *provider.Client
	Rebuild   func(idempotency.Record, provider.Charge) (idempotency.Response, error)
	Retention time.Duration
	Now       func() time.Time
	// Settle is ReconcilerConfig.Settle (providerTimeout when zero).
	Settle time.Duration
	// ResolveTime is ReconcilerConfig.ResolveTime (its default when zero).
	ResolveTime time.Duration
	// Deliverable is ReconcilerConfig.Deliverable.
	Deliverable func(idempotency.Response) error
}

// harness is a Reconciler with its metrics and logs.
type harness struct {
	r       *recovery.Reconciler
	metrics *lambdatest.Buffer
	logs    *lambdatest.Buffer
}

func newHarness(t *testing.T, c config) harness {
	t.Helper()
	h := harness{metrics: &lambdatest.Buffer{}, logs: &lambdatest.Buffer{}}
	if c.Rebuild == nil {
		c.Rebuild = rebuild
	}
	if c.Retention == 0 {
		c.Retention = retention
	}
	if c.Settle == 0 {
		c.Settle = providerTimeout
	}
	r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
		Store:       c.Store,
		Resolvers:   idempotency.Resolvers{route: chargeResolver(c.Provider, c.Rebuild)},
		Settle:      c.Settle,
		ResolveTime: c.ResolveTime,
		Retention:   c.Retention,
		Deliverable: c.Deliverable,
		Logger:      slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:     metrics.New(h.metrics, "once", map[string]string{"Service": "reconciler"}),
		Now:         c.Now,
	})
	if err != nil {
		t.Fatalf("recovery.NewReconciler: %v", err)
	}
	h.r = r
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reconciler logs:\n%s", h.logs.String())
		}
	})
	return h
}

// handle runs the reconciler on recs and returns the failed sequence
// numbers.
func (h harness) handle(ctx context.Context, t *testing.T, recs ...events.DynamoDBEventRecord) []string {
	t.Helper()
	resp, err := h.r.Handle(ctx, events.DynamoDBEvent{Records: recs})
	if err != nil {
		t.Fatalf("Handle() error = %v, want nil (failures are reported per record)", err)
	}
	return lambdatest.Failures(resp)
}

// reservation is an External IN_PROGRESS record as the middleware writes it.
func reservation(key idempotency.Key, created time.Time, lease time.Duration) idempotency.Record {
	body, _ := json.Marshal(chargeRequest)
	canonical, _ := idempotency.Canonical(body)
	return idempotency.Record{
		Key:         key,
		Status:      idempotency.StatusInProgress,
		Route:       route,
		Fingerprint: idempotency.Fingerprint(http.MethodPost, route, canonical),
		External:    true,
		LeaseToken:  idempotency.NewToken(),
		ExpiresAt:   created.Add(lease),
		Request:     canonical,
		CreatedAt:   created,
		UpdatedAt:   created,
	}
}

// unknown reserves key and marks it UNKNOWN at markedAt, as the api does when
// its provider call times out. It returns the reservation, the UNKNOWN record
// and the MODIFY stream record of the change.
func (w world) unknown(t *testing.T, key idempotency.Key, markedAt time.Time) (idempotency.Record, idempotency.Record, events.DynamoDBEventRecord) {
	t.Helper()
	created := markedAt.Add(-10 * time.Second)
	res := reservation(key, created, 30*time.Second)
	if err := w.store.Reserve(t.Context(), res, nil, created); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	old := w.image(t, key)
	if err := w.store.MarkUnknown(t.Context(), key, res.LeaseToken, idempotency.NewToken(), markedAt.Add(retention), markedAt); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	item := dynamotest.Item(t, w.db, w.names.ByLogicalID["IdempotencyTable"], key.ID())
	rec, err := dynamo.RecordFromItem(item)
	if err != nil {
		t.Fatal(err)
	}
	return res, rec, lambdatest.Record(events.DynamoDBOperationTypeModify, old, stream.FromSDK(item), nil, markedAt)
}

func TestReconciler(t *testing.T) {
	w := newWorld(t)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	tests := []struct {
		name       string
		charge     string        // source of a charge made before handling ("" for none)
		late       bool          // the charge is made 150ms into handling instead
		markedAgo  time.Duration // how long before handling the record became UNKNOWN
		deadline   time.Duration // bound on the invocation (none when 0)
		before     func(t *testing.T, key idempotency.Key, rec idempotency.Record)
		down       bool // the provider cannot be reached
		badRebuild bool
		huge       bool               // the rebuilt answer is too large to store
		want       idempotency.Status // "" for no record
		failed     bool
		metrics    map[string]int
		alerts     []string      // levels of the lines logged at WARN or above
		minTime    time.Duration // handling ends at least this long after the record became UNKNOWN
		maxTime    time.Duration // and at most this long (when set)
	}{
		{
			name: "succeeded charge: completed", charge: "tok_visa", markedAgo: 10 * time.Second,
			want: idempotency.StatusCompleted, metrics: map[string]int{"reconcile_resolved": 1},
		},
		{
			name: "declined charge: completed", charge: "tok_chargeDeclined", markedAgo: 10 * time.Second,
			want: idempotency.StatusCompleted, metrics: map[string]int{"reconcile_resolved": 1},
		},
		{
			name: "succeeded charge, just marked: completed without waiting", charge: "tok_visa",
			want: idempotency.StatusCompleted, metrics: map[string]int{"reconcile_resolved": 1},
			maxTime: providerTimeout / 2,
		},
		{
			name: "no charge, settled: released", markedAgo: 10 * time.Second,
			metrics: map[string]int{"reconcile_resolved": 1}, maxTime: providerTimeout / 2,
		},
		{
			name:    "no charge, just marked: released once Settle has passed",
			metrics: map[string]int{"reconcile_resolved": 1}, minTime: providerTimeout - 50*time.Millisecond,
		},
		{
			name: "charge lands while waiting: completed", charge: "tok_visa", late: true,
			want: idempotency.StatusCompleted, metrics: map[string]int{"reconcile_resolved": 1},
		},
		{
			// An expected deferral, retried: not reconcile_failed, whose
			// alarm is for faults.
			name: "no charge, just marked, no time to wait: deferred", deadline: 300 * time.Millisecond,
			want: idempotency.StatusUnknown, failed: true, metrics: map[string]int{"reconcile_deferred": 1},
			alerts: []string{"WARN"},
		},
		{
			name: "completed elsewhere: left alone", charge: "tok_visa", markedAgo: 10 * time.Second,
			before: func(t *testing.T, key idempotency.Key, rec idempotency.Record) {
				done := rec
				done.Status, done.Request = idempotency.StatusCompleted, nil
				done.Response = &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{"by":"the original request"}`)}
				if err := w.store.Complete(t.Context(), done, rec.LeaseToken, nil); err != nil {
					t.Fatalf("Complete: %v", err)
				}
			},
			want: idempotency.StatusCompleted, metrics: map[string]int{},
		},
		{
			name: "released elsewhere, provider has a charge: left alone", charge: "tok_visa", markedAgo: 10 * time.Second,
			before: func(t *testing.T, key idempotency.Key, rec idempotency.Record) {
				if err := w.store.Release(t.Context(), key, rec.LeaseToken, nil); err != nil {
					t.Fatalf("Release: %v", err)
				}
			},
			metrics: map[string]int{},
		},
		{
			name: "marked again under a newer lease: left alone", markedAgo: 10 * time.Second,
			before: func(t *testing.T, key idempotency.Key, rec idempotency.Record) {
				if err := w.store.MarkUnknown(t.Context(), key, rec.LeaseToken, idempotency.NewToken(), rec.ExpiresAt, rec.UpdatedAt); err != nil {
					t.Fatalf("MarkUnknown: %v", err)
				}
			},
			want: idempotency.StatusUnknown, metrics: map[string]int{},
		},
		{
			name: "provider unreachable: fails", charge: "tok_visa", markedAgo: 10 * time.Second, down: true,
			want: idempotency.StatusUnknown, failed: true, metrics: map[string]int{"reconcile_failed": 1},
			alerts: []string{"ERROR"},
		},
		{
			// Not stored, the answer would leave the key UNKNOWN for its
			// retention, the reconciler failing on it at every redrive.
			name: "answer too large to store: completed with response_too_large", charge: "tok_visa", markedAgo: 10 * time.Second, huge: true,
			want: idempotency.StatusCompleted, metrics: map[string]int{"reconcile_resolved": 1},
			alerts: []string{"ERROR"}, // the answer the request earned is lost: an operator's to know
		},
		{
			name: "response cannot be rebuilt: fails", charge: "tok_visa", markedAgo: 10 * time.Second, badRebuild: true,
			want: idempotency.StatusUnknown, failed: true, metrics: map[string]int{"reconcile_failed": 1},
			alerts: []string{"ERROR"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := idempotency.NewKey("acme", fmt.Sprintf("reconciler-case-%d", i))
			marked := time.Now().Add(-tt.markedAgo)
			_, rec, ev := w.unknown(t, key, marked)
			if tt.charge != "" && !tt.late {
				w.charge(t, key, tt.charge)
			}
			if tt.before != nil {
				tt.before(t, key, rec)
			}
			var snapshot *idempotency.Record
			if r, err := w.store.Get(t.Context(), key); err == nil {
				snapshot = &r
			}

			cfg := config{Store: w.store, Provider: w.provider}
			if tt.down {
				cfg.Provider = provider.New(down.URL, &http.Client{Timeout: providerTimeout})
			}
			if tt.badRebuild {
				cfg.Rebuild = func(idempotency.Record, provider.Charge) (idempotency.Response, error) {
					return idempotency.Response{}, errors.New("cannot rebuild")
				}
			}
			if tt.huge {
				cfg.Rebuild = func(rec idempotency.Record, c provider.Charge) (idempotency.Response, error) {
					resp, err := rebuild(rec, c)
					resp.Body = make([]byte, dynamo.MaxStoredBody+1)
					rand.Read(resp.Body) // incompressible
					return resp, err
				}
			}
			h := newHarness(t, cfg)
			ctx := t.Context()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			if tt.late {
				go func() {
					time.Sleep(150 * time.Millisecond)
					w.charge(t, key, tt.charge)
				}()
			}
			start := time.Now()
			failed := h.handle(ctx, t, ev)
			elapsed := time.Since(start)
			end := time.Now()

			if got, want := len(failed) > 0, tt.failed; got != want {
				t.Errorf("Handle() failures = %v, want failed %v", failed, want)
			}
			if end.Sub(marked) < tt.minTime || (tt.maxTime > 0 && elapsed > tt.maxTime) {
				t.Errorf("Handle() took %v and ended %v after the record became UNKNOWN, want it to end at least %v after that and take at most %v",
					elapsed, end.Sub(marked), tt.minTime, tt.maxTime)
			}
			got, err := w.store.Get(t.Context(), key)
			switch {
			case tt.want == "":
				if !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("Get() = %s, %v; want ErrNotFound (released)", got.Status, err)
				}
			case err != nil:
				t.Fatalf("Get() = %v, want a %s record", err, tt.want)
			case tt.huge:
				if got.Status != idempotency.StatusCompleted || got.Response == nil || got.Response.Status != http.StatusInternalServerError ||
					!strings.Contains(string(got.Response.Body), `"code":"response_too_large"`) {
					t.Errorf("Get() = %s %+v, want COMPLETED with 500 response_too_large", got.Status, got.Response)
				}
			case tt.want == idempotency.StatusCompleted && snapshot != nil && snapshot.Status == idempotency.StatusUnknown:
				checkCompleted(t, w, rec, got, start, end)
			default:
				if diff := cmp.Diff(*snapshot, got); diff != "" {
					t.Errorf("record changed (-before +after):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tt.metrics, lambdatest.Counts(t, h.metrics.String(), "reconciler")); diff != "" {
				t.Errorf("metrics mismatch (-want +got):\n%s", diff)
			}
			var alerts []string
			for _, line := range h.logs.Lines(t) {
				if level := fmt.Sprint(line["level"]); level == "WARN" || level == "ERROR" {
					alerts = append(alerts, level)
				}
			}
			if diff := cmp.Diff(tt.alerts, alerts); diff != "" {
				t.Errorf("levels of the lines logged at WARN or above (-want +got):\n%s", diff)
			}
			if logs := h.logs.String(); strings.Contains(logs, key.Hash) || !strings.Contains(logs, key.Short()) {
				t.Errorf("logs hold the full key hash or not its short form %s:\n%s", key.Short(), logs)
			}
		})
	}
}

// checkCompleted checks that got is rec completed by the reconciler between
// start and end with the response rebuilt from the provider's charge.
func checkCompleted(t *testing.T, w world, rec, got idempotency.Record, start, end time.Time) {
	t.Helper()
	charge, err := w.provider.Lookup(t.Context(), rec.ForwardKey())
	if err != nil {
		t.Fatalf("provider Lookup: %v", err)
	}
	resp, err := rebuild(rec, charge)
	if err != nil {
		t.Fatal(err)
	}
	want := idempotency.Record{
		Key:         rec.Key,
		Status:      idempotency.StatusCompleted,
		Route:       rec.Route,
		Fingerprint: rec.Fingerprint,
		External:    true,
		LeaseToken:  rec.LeaseToken,
		ExpiresAt:   got.UpdatedAt.Add(retention),
		Request:     rec.Request,
		Response:    &resp,
		CreatedAt:   rec.CreatedAt,
		UpdatedAt:   got.UpdatedAt,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("completed record mismatch (-want +got):\n%s", diff)
	}
	if got.UpdatedAt.Before(start.Truncate(time.Millisecond)) || got.UpdatedAt.After(end) {
		t.Errorf("completed at %v, want between %v and %v", got.UpdatedAt, start, end)
	}
}

// TestReconcilerBatch checks that a failed record fails the rest of its
// batch, which is not applied before it.
func TestReconcilerBatch(t *testing.T) {
	w := newWorld(t)
	past := time.Now().Add(-time.Minute)
	_, _, first := w.unknown(t, idempotency.NewKey("acme", "batch-first"), past)
	first.EventName = string(events.DynamoDBOperationTypeRemove) // not the reconciler's
	_, _, bad := w.unknown(t, idempotency.NewKey("acme", "batch-bad"), past)
	bad.Change.NewImage[dynamo.AttrPK] = events.NewStringAttribute("no-separator")
	lastKey := idempotency.NewKey("acme", "batch-last")
	_, last, good := w.unknown(t, lastKey, past)
	w.charge(t, lastKey, "tok_visa")

	h := newHarness(t, config{Store: w.store, Provider: w.provider})
	failed := h.handle(t.Context(), t, first, bad, good)
	if diff := cmp.Diff([]string{bad.Change.SequenceNumber, good.Change.SequenceNumber}, failed); diff != "" {
		t.Errorf("batch item failures mismatch (-want +got):\n%s", diff)
	}
	if got, err := w.store.Get(t.Context(), lastKey); err != nil || !cmp.Equal(last, got) {
		t.Errorf("record after the failed one: Get() = %+v, %v; want it untouched, %+v", got, err, last)
	}
	if diff := cmp.Diff(map[string]int{"reconcile_failed": 1}, lambdatest.Counts(t, h.metrics.String(), "reconciler")); diff != "" {
		t.Errorf("metrics mismatch (-want +got):\n%s", diff)
	}
}

// TestReconcilerIgnores checks that records that are not UNKNOWN are left
// alone: the provider, unreachable here, is never asked.
func TestReconcilerIgnores(t *testing.T) {
	w := newWorld(t)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	key := idempotency.NewKey("acme", "ignored")
	now := time.Now()
	res, rec, marked := w.unknown(t, key, now.Add(-time.Minute))
	reserved := stream.FromSDK(dynamo.ItemFromRecord(res))
	unknown := marked.Change.NewImage
	done := rec
	done.Status, done.Request = idempotency.StatusCompleted, nil
	done.Response = &idempotency.Response{Status: http.StatusCreated, Body: []byte("{}")}
	completed := stream.FromSDK(dynamo.ItemFromRecord(done))
	tests := []struct {
		name string
		rec  events.DynamoDBEventRecord
	}{
		{"REMOVE UNKNOWN by TTL", lambdatest.Record(events.DynamoDBOperationTypeRemove, unknown, nil, lambdatest.TTLIdentity(), now)},
		{"INSERT IN_PROGRESS", lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, reserved, nil, now)},
		{"MODIFY UNKNOWN -> COMPLETED", lambdatest.Record(events.DynamoDBOperationTypeModify, unknown, completed, nil, now)},
		{"MODIFY COMPLETED -> IN_PROGRESS", lambdatest.Record(events.DynamoDBOperationTypeModify, completed, reserved, nil, now)},
		{"MODIFY without a new image", lambdatest.Record(events.DynamoDBOperationTypeModify, unknown, nil, nil, now)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, config{Store: w.store, Provider: provider.New(down.URL, nil)})
			if failed := h.handle(t.Context(), t, tt.rec); failed != nil {
				t.Errorf("Handle() failures = %v, want none", failed)
			}
			if got, err := w.store.Get(t.Context(), key); err != nil || !cmp.Equal(rec, got) {
				t.Errorf("Get() = %+v, %v; want the UNKNOWN record untouched", got, err)
			}
			if got := lambdatest.Counts(t, h.metrics.String(), "reconciler"); len(got) != 0 {
				t.Errorf("metrics = %v, want none", got)
			}
		})
	}
}

// TestZombieAfterReconcile checks that the original request, back after the
// reconciler finalised its key, cannot overwrite the recorded response.
func TestZombieAfterReconcile(t *testing.T) {
	w := newWorld(t)
	key := idempotency.NewKey("acme", "zombie")
	res, rec, ev := w.unknown(t, key, time.Now().Add(-time.Minute))
	w.charge(t, key, "tok_visa")
	h := newHarness(t, config{Store: w.store, Provider: w.provider})
	if failed := h.handle(t.Context(), t, ev); failed != nil {
		t.Fatalf("Handle() failures = %v, want none", failed)
	}
	final, err := w.store.Get(t.Context(), key)
	if err != nil || final.Status != idempotency.StatusCompleted {
		t.Fatalf("Get() = %s, %v; want COMPLETED", final.Status, err)
	}
	for _, lease := range []struct{ name, token string }{
		{"the original request's lease", res.LeaseToken},
		{"the UNKNOWN record's lease", rec.LeaseToken},
	} {
		zombie := res
		zombie.Status, zombie.Request, zombie.UpdatedAt = idempotency.StatusCompleted, nil, time.Now()
		zombie.ExpiresAt = zombie.UpdatedAt.Add(retention)
		zombie.Response = &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{"zombie":true}`)}
		err := w.store.Complete(t.Context(), zombie, lease.token, nil)
		var conflict *idempotency.ConflictError
		if !errors.As(err, &conflict) || conflict.Existing == nil || conflict.Existing.Status != idempotency.StatusCompleted {
			t.Errorf("Complete under %s = %v, want a *ConflictError carrying the COMPLETED record", lease.name, err)
		}
		if err := w.store.Release(t.Context(), key, lease.token, nil); !errors.As(err, &conflict) {
			t.Errorf("Release under %s = %v, want a *ConflictError", lease.name, err)
		}
	}
	if got, err := w.store.Get(t.Context(), key); err != nil || !cmp.Equal(final, got) {
		t.Errorf("after the zombie: Get() = %+v, %v; want the reconciled record unchanged", got, err)
	}
}

// TestNewReconciler: what is missing is refused at construction, a typed
// nil (an interface holding a nil pointer or a nil ResolverFunc, which would
// panic at its first use) included.
func TestNewReconciler(t *testing.T) {
	tests := []struct {
		name string
		cfg  recovery.ReconcilerConfig
		want []string
	}{
		{name: "nothing", cfg: recovery.ReconcilerConfig{Resolvers: idempotency.Resolvers{"POST /v1/x": nil}},
			want: []string{"Store", "nil Resolver", "Settle"}},
		{name: "typed nils", cfg: recovery.ReconcilerConfig{
			Store:     (*memory.Store)(nil),
			Resolvers: idempotency.Resolvers{"POST /v1/x": idempotency.ResolverFunc(nil)},
			Settle:    time.Second,
		}, want: []string{"Store", `route "POST /v1/x" has a nil Resolver`}},
		{name: "negative resolve time", cfg: recovery.ReconcilerConfig{
			Store: memory.New(),
			Resolvers: idempotency.Resolvers{"POST /v1/x": idempotency.ResolverFunc(func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
				return idempotency.Resolution{}, nil
			})},
			Settle:      time.Second,
			ResolveTime: -time.Second,
		}, want: []string{"ResolveTime", "-1s", "negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := recovery.NewReconciler(tt.cfg)
			if err == nil {
				t.Fatal("NewReconciler() = nil error, want one")
			}
			for _, field := range tt.want {
				if !strings.Contains(err.Error(), field) {
					t.Errorf("NewReconciler() error = %q, want it to name %s", err, field)
				}
			}
		})
	}
}
