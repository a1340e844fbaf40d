package dynamo_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/dynamotest"
)

// legacyTTL gives k's item the TTL attribute at ttl, as an External
// reservation written before External reservations lost it carries (its
// lease plus a day, then).
func legacyTTL(t *testing.T, client *dynamodb.Client, table string, k idempotency.Key, ttl time.Time) {
	t.Helper()
	if _, err := client.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: k.ID()}},
		UpdateExpression:          aws.String("SET #ttl = :ttl"),
		ConditionExpression:       aws.String("attribute_exists(#pk)"),
		ExpressionAttributeNames:  map[string]string{"#ttl": dynamo.AttrExpiresAt, "#pk": dynamo.AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":ttl": &types.AttributeValueMemberN{Value: strconv.FormatInt(ttl.Unix(), 10)}},
	}); err != nil {
		t.Fatalf("UpdateItem(legacy TTL): %v", err)
	}
}

// TestExternalCarriesNoTTL: every write that leaves a record an External
// reservation (IN_PROGRESS) leaves its item without the TTL attribute,
// removing the one an item written before carries, so that DynamoDB's TTL
// never deletes it: deleted while its check was lost and nobody retried,
// its key would be free for a second call out until the sweeper restored
// it. Its lease deadline (expires_at_ms) is written as before. A
// reservation that is not External keeps a TTL (its key is reclaimable at
// its expiry anyway), and the completion of an External one gives it its
// retention's TTL.
func TestExternalCarriesNoTTL(t *testing.T) {
	store, client, names := newStore(t)
	table := names.ByLogicalID["IdempotencyTable"]
	ttlOff(t, client, table) // the legacy items' TTL is past; the test reads them
	now := time.Now().Truncate(time.Millisecond)
	lease := now.Add(30 * time.Second)
	reservation := func(k idempotency.Key, external bool) idempotency.Record {
		rec := reservedRecord(k, "lease", lease)
		if external {
			rec.External, rec.Request = true, []byte(`{"amount":1000}`)
		}
		return rec
	}
	effect := func(name string) idempotency.Effect {
		return dynamo.Insert(names.ByLogicalID["PaymentsTable"], "pk", map[string]any{"pk": t.Name() + "/" + name})
	}
	reserve := func(t *testing.T, rec idempotency.Record, effects ...idempotency.Effect) {
		t.Helper()
		if err := store.Reserve(t.Context(), rec, effects, now); err != nil {
			t.Fatalf("Reserve = %v", err)
		}
	}
	advance := func(t *testing.T, k idempotency.Key, rec idempotency.Record, p idempotency.Progress, effects ...idempotency.Effect) {
		t.Helper()
		p.External = rec.External
		if err := store.Advance(t.Context(), k, "lease", p, effects); err != nil {
			t.Fatalf("Advance = %v", err)
		}
	}
	step := func(from string, expires time.Time) idempotency.Progress {
		return idempotency.Progress{From: from, Point: "charge_created", Data: map[string]string{"charge": "ch_1"},
			LeaseToken: "lease", ExpiresAt: expires, UpdatedAt: now}
	}
	for _, tt := range []struct {
		name     string
		external bool
		// write leaves k's record IN_PROGRESS (or, completed set,
		// completes it), returning the expiry it wrote.
		write     func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time
		completed bool
	}{
		{"Reserve", true, func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time {
			reserve(t, rec)
			return lease
		}, false},
		{"Reserve with holds", true, func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time {
			reserve(t, rec, effect("hold"))
			return lease
		}, false},
		{"Advance", true, func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time {
			reserve(t, rec)
			advance(t, k, rec, step("", lease.Add(time.Minute)))
			return lease.Add(time.Minute)
		}, false},
		{"Advance with effects", true, func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time {
			reserve(t, rec)
			advance(t, k, rec, step("", lease.Add(time.Minute)), effect("advanced"))
			return lease.Add(time.Minute)
		}, false},
		{"Advance of a legacy item", true, func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time {
			rec.Point = "order_created"
			reserve(t, rec)
			legacyTTL(t, client, table, k, lease.Add(24*time.Hour))
			advance(t, k, rec, step("order_created", lease.Add(time.Minute)))
			return lease.Add(time.Minute)
		}, false},
		{"Advance of a legacy item with effects", true, func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time {
			rec.Point = "order_created"
			reserve(t, rec)
			legacyTTL(t, client, table, k, lease.Add(24*time.Hour))
			advance(t, k, rec, step("order_created", lease.Add(time.Minute)), effect("legacy"))
			return lease.Add(time.Minute)
		}, false},
		{"Complete", true, func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time {
			reserve(t, rec)
			done := completedRecord(k, "lease", now.Add(24*time.Hour))
			done.External = true
			if err := store.Complete(t.Context(), done, "lease", nil); err != nil {
				t.Fatalf("Complete = %v", err)
			}
			return done.ExpiresAt
		}, true},
		{"not External: Reserve", false, func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time {
			reserve(t, rec)
			return lease
		}, true},
		{"not External: Advance", false, func(t *testing.T, k idempotency.Key, rec idempotency.Record) time.Time {
			reserve(t, rec)
			advance(t, k, rec, step("", lease.Add(time.Minute)))
			return lease.Add(time.Minute)
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := idempotency.NewKey("acme", t.Name())
			expiry := tt.write(t, k, reservation(k, tt.external))
			got, err := store.Get(t.Context(), k)
			if err != nil {
				t.Fatalf("Get = %v", err)
			}
			if want := expiry.Truncate(time.Millisecond); !got.ExpiresAt.Equal(want) {
				t.Errorf("expiry (expires_at_ms) = %v, want %v", got.ExpiresAt, want)
			}
			ttl, ok := ttlOf(t, dynamotest.Item(t, client, table, k.ID()))
			switch {
			case !tt.completed && ok:
				t.Errorf("External %s record: %s = %v, want none (DynamoDB's TTL must never delete it)", got.Status, dynamo.AttrExpiresAt, ttl)
			case tt.completed && !ok:
				t.Errorf("%s record (External %v): no %s, want one from its expiry %v", got.Status, got.External, dynamo.AttrExpiresAt, expiry)
			case tt.completed && ttl.Before(expiry.Truncate(time.Second)):
				t.Errorf("%s record (External %v): %s = %v, want at least its expiry %v", got.Status, got.External, dynamo.AttrExpiresAt, ttl, expiry)
			}
		})
	}
}

// crash is the panic with which TestExternalOutlivesTTL's handler dies
// after its call out.
type crash struct{}

// TestExternalOutlivesTTL: with DynamoDB Local's TTL on, an External
// reservation whose request called out and died, long past its lease (and
// its check lost: no checker runs here), is not deleted: a retry after TTL
// has run hands it to the reconciler (the client redrive: UNKNOWN, 409), a
// retry after TTL has run again gets 409 too, and the handler, which may
// have charged, runs once in all. A COMPLETED record past its TTL, written
// beside it, shows that TTL ran.
func TestExternalOutlivesTTL(t *testing.T) {
	store, client, names := newStore(t)
	table := names.ByLogicalID["IdempotencyTable"]
	mw, err := idempotency.New(idempotency.Config{
		Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true },
		Lease: 500 * time.Millisecond, Retention: time.Second, UnknownRedrive: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int32
	h := mw.External("POST /v1/charges", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); !ok {
			return
		}
		effects.Add(1) // the provider charged
		panic(crash{}) // and the function died before it answered
	}), unresolved(t))
	const body = `{"amount":1500}`
	key := idempotency.NewKey("acme", t.Name())
	func() {
		defer func() {
			if v := recover(); v != (crash{}) {
				t.Fatalf("first request: recovered %v, want the handler's crash", v)
			}
		}()
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.Header.Set(idempotency.Header, t.Name())
		h.ServeHTTP(httptest.NewRecorder(), r)
	}()
	abandoned, err := store.Get(t.Context(), key)
	if err != nil || abandoned.Status != idempotency.StatusInProgress || !abandoned.External {
		t.Fatalf("after the crash: %s (External %v), %v; want the External reservation", abandoned.Status, abandoned.External, err)
	}
	if ttl, ok := ttlOf(t, dynamotest.Item(t, client, table, key.ID())); ok {
		t.Errorf("%s = %v on the abandoned External reservation, want none: with its check lost and no retry, TTL would free its key", dynamo.AttrExpiresAt, ttl)
	}

	// retry checks that a retry gets 409 without running the handler,
	// and that the record is then UNKNOWN, without a TTL attribute.
	retry := func(t *testing.T) idempotency.Record {
		t.Helper()
		w, obs := post(h, t.Name(), body)
		if w.Code != http.StatusConflict || obs.Outcome != idempotency.OutcomeInProgress {
			t.Errorf("retry = %d %s (%s), want 409 %s", w.Code, w.Body, obs.Outcome, idempotency.OutcomeInProgress)
		}
		if n := effects.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		rec, err := store.Get(t.Context(), key)
		if err != nil || rec.Status != idempotency.StatusUnknown {
			t.Fatalf("record = %s, %v; want UNKNOWN, kept", rec.Status, err)
		}
		if ttl, ok := ttlOf(t, dynamotest.Item(t, client, table, key.ID())); ok {
			t.Errorf("%s = %v on the UNKNOWN record, want none", dynamo.AttrExpiresAt, ttl)
		}
		return rec
	}

	ttlRan(t, store, client, table, "control-1")
	if rec, err := store.Get(t.Context(), key); err != nil || rec.LeaseToken != abandoned.LeaseToken {
		t.Fatalf("after TTL ran: %s under %q, %v; want the abandoned reservation, untouched", rec.Status, rec.LeaseToken, err)
	}
	first := retry(t) // past the lease: the client redrive hands it to the reconciler
	if first.LeaseToken == abandoned.LeaseToken {
		t.Errorf("lease token kept %q: the retry did not redrive the reservation", first.LeaseToken)
	}
	ttlRan(t, store, client, table, "control-2")
	retry(t)
}
