package dynamo_test

import (
	"net/http"
	"strconv"
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

// legacyUnknown stores rec as an UNKNOWN item written before UNKNOWN
// records lost their TTL attribute: with expires_at, its expiry rounded up
// to the second.
func legacyUnknown(t *testing.T, client *dynamodb.Client, table string, rec idempotency.Record) {
	t.Helper()
	rec.Status = idempotency.StatusUnknown
	item := dynamo.ItemFromRecord(rec)
	ttl := rec.ExpiresAt.Unix()
	if rec.ExpiresAt.After(time.Unix(ttl, 0)) {
		ttl++
	}
	item[dynamo.AttrExpiresAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(ttl, 10)}
	if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem(legacy UNKNOWN item): %v", err)
	}
}

// ttlOf returns the TTL attribute of item, and whether it has one.
func ttlOf(t *testing.T, item map[string]types.AttributeValue) (time.Time, bool) {
	t.Helper()
	v, ok := item[dynamo.AttrExpiresAt]
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(attrText(v), 10, 64)
	if err != nil {
		t.Fatalf("%s = %v: %v", dynamo.AttrExpiresAt, v, err)
	}
	return time.Unix(n, 0).UTC(), true
}

// TestUnknownCarriesNoTTL: every write that leaves a record UNKNOWN leaves
// its item without the TTL attribute, removing the one an item written
// before carries, so that DynamoDB's TTL never deletes it: deleted, its key
// would be free for a second execution until the sweeper restored it. Its
// expiry for the conditions (expires_at_ms) is written as before. The
// completion that reconciles it gives it its retention's TTL again, and its
// answer's chunk items the same.
func TestUnknownCarriesNoTTL(t *testing.T) {
	store, client, names := newStore(t)
	table := names.ByLogicalID["IdempotencyTable"]
	ttlOff(t, client, table) // the legacy items' TTL is past; the test reads them
	now := time.Now().Truncate(time.Millisecond)
	expires := now.Add(time.Hour)
	external := func(k idempotency.Key, lease string) idempotency.Record {
		rec := reservedRecord(k, lease, now.Add(30*time.Second))
		rec.External, rec.Request = true, []byte(`{"amount":1000}`)
		return rec
	}
	effect := func(name string) idempotency.Effect {
		return dynamo.Insert(names.ByLogicalID["PaymentsTable"], "pk", map[string]any{"pk": t.Name() + "/" + name})
	}
	for _, tt := range []struct {
		name string
		// write leaves k's record UNKNOWN (or, wantTTL set, completes
		// it), returning the expiry it wrote.
		write   func(t *testing.T, k idempotency.Key) time.Time
		wantTTL bool
	}{
		{"MarkUnknown", func(t *testing.T, k idempotency.Key) time.Time {
			if err := store.Reserve(t.Context(), external(k, "lease"), nil, now); err != nil {
				t.Fatal(err)
			}
			if err := store.MarkUnknown(t.Context(), k, "lease", "unknown", expires, now); err != nil {
				t.Fatalf("MarkUnknown = %v", err)
			}
			return expires
		}, false},
		{"restored", func(t *testing.T, k idempotency.Key) time.Time {
			rec := external(k, "restored")
			rec.Status, rec.ExpiresAt = idempotency.StatusUnknown, expires
			if err := store.Reserve(t.Context(), rec, nil, now); err != nil {
				t.Fatalf("Reserve(UNKNOWN) = %v", err)
			}
			return expires
		}, false},
		{"redrive of a legacy item", func(t *testing.T, k idempotency.Key) time.Time {
			legacyUnknown(t, client, table, external(k, "lease"))
			if err := store.MarkUnknown(t.Context(), k, "lease", "redriven", expires, now); err != nil {
				t.Fatalf("MarkUnknown(UNKNOWN) = %v", err)
			}
			return expires
		}, false},
		{"Advance of a legacy item", func(t *testing.T, k idempotency.Key) time.Time {
			rec := external(k, "lease")
			rec.Point = "order_created"
			legacyUnknown(t, client, table, rec)
			p := idempotency.Progress{From: "order_created", Point: "charge_created", Data: map[string]string{"charge": "ch_1"},
				LeaseToken: "lease", ExpiresAt: expires, UpdatedAt: now, Status: idempotency.StatusUnknown, External: true}
			if err := store.Advance(t.Context(), k, "lease", p, nil); err != nil {
				t.Fatalf("Advance(UNKNOWN) = %v", err)
			}
			return expires
		}, false},
		{"Advance of a legacy item with effects", func(t *testing.T, k idempotency.Key) time.Time {
			rec := external(k, "lease")
			rec.Point = "order_created"
			legacyUnknown(t, client, table, rec)
			p := idempotency.Progress{From: "order_created", Point: "charge_created", Data: map[string]string{"charge": "ch_1"},
				LeaseToken: "lease", ExpiresAt: expires, UpdatedAt: now, Status: idempotency.StatusUnknown, External: true}
			if err := store.Advance(t.Context(), k, "lease", p, []idempotency.Effect{effect("advanced")}); err != nil {
				t.Fatalf("Advance(UNKNOWN, an effect) = %v", err)
			}
			return expires
		}, false},
		{"Complete", func(t *testing.T, k idempotency.Key) time.Time {
			rec := external(k, "unknown")
			rec.Status, rec.ExpiresAt = idempotency.StatusUnknown, expires
			if err := store.Reserve(t.Context(), rec, nil, now); err != nil {
				t.Fatal(err)
			}
			done := completedRecord(k, "unknown", now.Add(24*time.Hour))
			done.External = true
			if err := store.Complete(t.Context(), done, "unknown", nil); err != nil {
				t.Fatalf("Complete(UNKNOWN) = %v", err)
			}
			return done.ExpiresAt
		}, true},
		{"Complete with a large answer", func(t *testing.T, k idempotency.Key) time.Time {
			rec := external(k, "unknown")
			rec.Status, rec.ExpiresAt = idempotency.StatusUnknown, expires
			if err := store.Reserve(t.Context(), rec, nil, now); err != nil {
				t.Fatal(err)
			}
			done := completedRecord(k, "unknown", now.Add(24*time.Hour).Add(300*time.Millisecond))
			done.External, done.Response.Body = true, randomBytes(t, 600<<10)
			if err := store.Complete(t.Context(), done, "unknown", []idempotency.Effect{effect("completed")}); err != nil {
				t.Fatalf("Complete(UNKNOWN, 600 KiB) = %v", err)
			}
			chunks := chunkItems(t, client, table, k)
			if len(chunks) == 0 {
				t.Fatal("the answer was stored without chunk items")
			}
			for _, c := range chunks {
				if ttl, ok := ttlOf(t, c); !ok || ttl.Before(done.ExpiresAt.Truncate(time.Second)) {
					t.Errorf("chunk %s: %s = %v (present %v), want the record's retention", attrText(c[dynamo.AttrPK]), dynamo.AttrExpiresAt, ttl, ok)
				}
			}
			return done.ExpiresAt
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := idempotency.NewKey("acme", t.Name())
			expiry := tt.write(t, k)
			got, err := store.Get(t.Context(), k)
			if err != nil {
				t.Fatalf("Get = %v", err)
			}
			if want := expiry.Truncate(time.Millisecond); !got.ExpiresAt.Equal(want) {
				t.Errorf("expiry (expires_at_ms) = %v, want %v", got.ExpiresAt, want)
			}
			ttl, ok := ttlOf(t, dynamotest.Item(t, client, table, k.ID()))
			switch {
			case !tt.wantTTL && ok:
				t.Errorf("%s record: %s = %v, want none (DynamoDB's TTL must never delete it)", got.Status, dynamo.AttrExpiresAt, ttl)
			case tt.wantTTL && !ok:
				t.Errorf("%s record: no %s, want its expiry %v rounded up", got.Status, dynamo.AttrExpiresAt, expiry)
			case tt.wantTTL:
				want := expiry.Truncate(time.Second)
				if want.Before(expiry) {
					want = want.Add(time.Second)
				}
				if !ttl.Equal(want) {
					t.Errorf("%s record: %s = %v, want %v (its expiry rounded up)", got.Status, dynamo.AttrExpiresAt, ttl, want)
				}
			}
		})
	}
}

// TestUnknownOutlivesTTL: with DynamoDB Local's TTL on, an UNKNOWN record
// whose retention (1s here) ran out long ago is not deleted, whether it
// went UNKNOWN at its request or at a redrive by a retry: every retry gets
// 409 and the handler, which may have charged, runs once in all. A
// COMPLETED record past its TTL, written beside it, shows that TTL ran.
func TestUnknownOutlivesTTL(t *testing.T) {
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
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		effects.Add(1)
		call.Unknown() // the provider's answer was lost
		w.WriteHeader(http.StatusGatewayTimeout)
	}), unresolved(t))
	const body = `{"amount":1500}`
	key := idempotency.NewKey("acme", t.Name())
	if w, _ := post(h, t.Name(), body); w.Code != http.StatusGatewayTimeout {
		t.Fatalf("first request = %d %s, want 504", w.Code, w.Body)
	}

	// stays checks that the record is UNKNOWN, without a TTL attribute,
	// its expiry long past, and that a retry gets 409 without running the
	// handler.
	stays := func(t *testing.T) idempotency.Record {
		t.Helper()
		rec, err := store.Get(t.Context(), key)
		if err != nil || rec.Status != idempotency.StatusUnknown {
			t.Fatalf("record = %s, %v; want UNKNOWN, kept", rec.Status, err)
		}
		if ttl, ok := ttlOf(t, dynamotest.Item(t, client, table, key.ID())); ok {
			t.Errorf("%s = %v on the UNKNOWN record, want none", dynamo.AttrExpiresAt, ttl)
		}
		if !rec.ExpiresAt.Before(time.Now()) {
			t.Errorf("expiry %v is not past: the test shows nothing", rec.ExpiresAt)
		}
		w, obs := post(h, t.Name(), body)
		if w.Code != http.StatusConflict || obs.Outcome != idempotency.OutcomeInProgress {
			t.Errorf("retry = %d %s (%s), want 409 %s", w.Code, w.Body, obs.Outcome, idempotency.OutcomeInProgress)
		}
		if n := effects.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		return rec
	}

	ttlRan(t, store, client, table, "control-1")
	first := stays(t) // this retry, over a second after it went UNKNOWN, redrives it
	ttlRan(t, store, client, table, "control-2")
	if second := stays(t); second.LeaseToken == first.LeaseToken {
		t.Errorf("lease token kept %q: no retry redrove the record", first.LeaseToken)
	}
}

// ttlRan waits until DynamoDB Local's TTL has deleted a COMPLETED record
// whose TTL has passed (written to table as name, under t's name), then
// another second: a TTL pass has gone over the table.
func ttlRan(t *testing.T, store *dynamo.Store, client *dynamodb.Client, table, name string) {
	t.Helper()
	k := idempotency.NewKey("acme", t.Name()+"/"+name)
	if err := store.Commit(t.Context(), completedRecord(k, "", time.Now().Add(-2*time.Second)), nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for dynamotest.Exists(t, client, table, k.ID()) {
		if time.Since(start) > 60*time.Second {
			t.Fatal("DynamoDB Local's TTL did not delete an expired COMPLETED record in 60s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("TTL deleted the expired COMPLETED record in %v", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(time.Second)
}
