package dynamo_test

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
)

// TestExpiredChunksGone: DynamoDB's TTL deletes an expired record's chunk
// items on its own schedule, possibly before the record's item. Such a
// record counts as absent, so reading it must not fail: Get and the
// ALL_OLD item of a failed condition give the record without its answer
// (which nobody may replay). A live record whose chunks are missing is
// corrupt, and reading it still fails.
func TestExpiredChunksGone(t *testing.T) {
	store, client, names := newStore(t)
	table := names.ByLogicalID["IdempotencyTable"]
	ttlOff(t, client, table) // the test deletes what TTL would have
	body := make([]byte, 1<<20)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	// commit stores an incompressible 1 MiB answer expiring at expires,
	// then deletes its chunk items as TTL would.
	commit := func(t *testing.T, name string, expires time.Time) idempotency.Key {
		t.Helper()
		k := idempotency.NewKey("acme", name)
		rec := completedRecord(k, "lease-1", expires)
		rec.Response.Body = body
		if err := store.Commit(t.Context(), rec, nil, expires.Add(-time.Hour)); err != nil {
			t.Fatalf("Commit = %v", err)
		}
		chunks := chunkItems(t, client, table, k)
		if len(chunks) == 0 {
			t.Fatal("the answer was stored without chunk items")
		}
		for _, c := range chunks {
			if _, err := client.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
				TableName: aws.String(table), Key: map[string]types.AttributeValue{dynamo.AttrPK: c[dynamo.AttrPK]},
			}); err != nil {
				t.Fatal(err)
			}
		}
		return k
	}

	t.Run("expired", func(t *testing.T) {
		k := commit(t, "expired", time.Now().Add(-2*time.Second))
		got, err := store.Get(t.Context(), k)
		if err != nil {
			t.Fatalf("Get(expired record, chunks deleted by TTL) = %v, want the record", err)
		}
		if got.Status != idempotency.StatusCompleted || got.Response != nil {
			t.Errorf("Get() = %s with response %v, want COMPLETED without a response", got.Status, got.Response != nil)
		}
		err = store.Complete(t.Context(), completedRecord(k, "lease-2", time.Now().Add(time.Hour)), "lease-2", nil)
		var conflict *idempotency.ConflictError
		if !errors.As(err, &conflict) || conflict.Existing == nil || conflict.Existing.Status != idempotency.StatusCompleted {
			t.Fatalf("Complete(another lease) = %v, want a *ConflictError carrying the COMPLETED record", err)
		}
		if conflict.Existing.Response != nil {
			t.Errorf("conflict's record has a response of %d bytes, want none", len(conflict.Existing.Response.Body))
		}
		// The key counts as absent: a new request takes it.
		next := completedRecord(k, "", time.Now().Add(time.Hour))
		if err := store.Commit(t.Context(), next, nil, time.Now()); err != nil {
			t.Errorf("Commit(after expiry) = %v, want nil", err)
		}
	})
	t.Run("live", func(t *testing.T) {
		k := commit(t, "live", time.Now().Add(time.Hour))
		if _, err := store.Get(t.Context(), k); err == nil {
			t.Error("Get(live record, chunks missing) = nil error, want an error: the record is corrupt")
		}
	})
}
