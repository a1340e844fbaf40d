package dynamo_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// TestChunksChecksum: an answer stored in chunk items is read back byte for
// byte, and one whose chunks no longer hold what was written (a chunk's
// bytes changed, two chunks' contents swapped, a chunk cut short) is an
// error, from Get and from the conflict of a write that reads it: never a
// wrong answer replayed. The body is incompressible, so it is stored as it
// is and only the checksum can tell.
func TestChunksChecksum(t *testing.T) {
	store, client, names := newStore(t)
	table := names.ByLogicalID["IdempotencyTable"]
	body := make([]byte, 500_000)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	// commit stores a live record with body as its answer and returns its
	// chunk items, by index.
	commit := func(t *testing.T, name string) (idempotency.Record, [][]byte, []map[string]types.AttributeValue) {
		t.Helper()
		rec := completedRecord(idempotency.NewKey("acme", name), "lease-1", time.Now().Add(time.Hour))
		rec.Response.Body = body
		if err := store.Commit(t.Context(), rec, nil, time.Now()); err != nil {
			t.Fatalf("Commit(%d bytes) = %v", len(body), err)
		}
		items := chunkItems(t, client, table, rec.Key)
		if len(items) < 2 {
			t.Fatalf("the answer was stored in %d chunk items, want at least 2", len(items))
		}
		parts := make([][]byte, len(items))
		byIndex := make([]map[string]types.AttributeValue, len(items))
		for _, it := range items {
			pk := it[dynamo.AttrPK].(*types.AttributeValueMemberS).Value
			i, err := strconv.Atoi(pk[strings.LastIndex(pk, "#")+1:])
			if err != nil || i >= len(items) {
				t.Fatalf("chunk item %q: no index", pk)
			}
			parts[i] = it[dynamo.AttrChunk].(*types.AttributeValueMemberB).Value
			byIndex[i] = it
		}
		if got := bytes.Join(parts, nil); !bytes.Equal(got, body) {
			t.Fatalf("the chunks hold %d bytes, not the body as it is (%d bytes)", len(got), len(body))
		}
		return rec, parts, byIndex
	}
	// setChunk replaces the bytes of a chunk item.
	setChunk := func(t *testing.T, item map[string]types.AttributeValue, b []byte) {
		t.Helper()
		_, err := client.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
			TableName:                 aws.String(table),
			Key:                       map[string]types.AttributeValue{dynamo.AttrPK: item[dynamo.AttrPK]},
			UpdateExpression:          aws.String("SET #chunk = :b"),
			ExpressionAttributeNames:  map[string]string{"#chunk": dynamo.AttrChunk},
			ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberB{Value: b}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("intact", func(t *testing.T) {
		rec, _, _ := commit(t, "intact")
		got, err := store.Get(t.Context(), rec.Key)
		if err != nil {
			t.Fatalf("Get = %v, want the record", err)
		}
		if got.Response == nil || !bytes.Equal(got.Response.Body, body) {
			t.Errorf("Get: the answer is not the body stored, byte for byte")
		}
	})
	for _, tt := range []struct {
		name    string
		corrupt func(t *testing.T, parts [][]byte, items []map[string]types.AttributeValue)
	}{
		{"a byte changed", func(t *testing.T, parts [][]byte, items []map[string]types.AttributeValue) {
			b := bytes.Clone(parts[1])
			b[len(b)/2] ^= 0x01
			setChunk(t, items[1], b)
		}},
		{"two chunks swapped", func(t *testing.T, parts [][]byte, items []map[string]types.AttributeValue) {
			setChunk(t, items[0], parts[1])
			setChunk(t, items[1], parts[0])
		}},
		{"a chunk cut short", func(t *testing.T, parts [][]byte, items []map[string]types.AttributeValue) {
			setChunk(t, items[0], parts[0][:len(parts[0])-1])
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec, parts, items := commit(t, tt.name)
			tt.corrupt(t, parts, items)
			got, err := store.Get(t.Context(), rec.Key)
			if err == nil || errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("Get(corrupt chunks) = %d bytes, %v; want an error, not an answer", answerLen(got), err)
			}
			err = store.Commit(t.Context(), completedRecord(rec.Key, "", time.Now().Add(time.Hour)), nil, time.Now())
			var conflict *idempotency.ConflictError
			if err == nil || errors.As(err, &conflict) {
				t.Errorf("Commit(taken key, corrupt chunks) = %v; want an error, not a conflict carrying a wrong answer", err)
			}
		})
	}
}

// answerLen is the length of rec's answer, -1 for none.
func answerLen(rec idempotency.Record) int {
	if rec.Response == nil {
		return -1
	}
	return len(rec.Response.Body)
}

// TestCompressedChunks: an answer that still needs chunk items once
// gzip-compressed (JSON of several MB: the record's item keeps no body, its
// encoding gzip) reads back byte for byte through Get and through the
// conflict of a write that finds it, whether a Commit (Atomic) or a
// Complete (Leased, External) stored it.
func TestCompressedChunks(t *testing.T) {
	store, _, _ := newStore(t)
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < 7<<20; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"item number %d","tags":["a","b","c"]}`, i, i)
	}
	b.WriteString(`]}`)
	body := []byte(b.String())
	for _, op := range []string{"commit", "complete"} {
		t.Run(op, func(t *testing.T) {
			now := time.Now()
			key := idempotency.NewKey("acme", t.Name())
			rec := completedRecord(key, "lease-1", now.Add(time.Hour))
			rec.Response.Body = body
			var err error
			if op == "commit" {
				err = store.Commit(t.Context(), rec, nil, now)
			} else {
				if err := store.Reserve(t.Context(), reservedRecord(key, "lease-1", now.Add(time.Minute)), nil, now); err != nil {
					t.Fatal(err)
				}
				err = store.Complete(t.Context(), rec, "lease-1", nil)
			}
			if err != nil {
				t.Fatalf("%s(%d bytes of JSON) = %v", op, len(body), err)
			}
			got, err := store.Get(t.Context(), key)
			if err != nil || got.Response == nil || !bytes.Equal(got.Response.Body, body) {
				t.Errorf("Get() = %v (response %v); want the %d bytes stored", err, got.Response != nil, len(body))
			}
			err = store.Reserve(t.Context(), reservedRecord(key, "lease-2", now.Add(time.Minute)), nil, now)
			var conflict *idempotency.ConflictError
			if !errors.As(err, &conflict) || conflict.Existing == nil || conflict.Existing.Response == nil || !bytes.Equal(conflict.Existing.Response.Body, body) {
				t.Errorf("Reserve() = %v; want a conflict carrying the %d bytes stored", err, len(body))
			}
		})
	}
}

// TestDamagedChunkReference: a record whose reference to its body's chunks
// is damaged (its chunk ID or checksum removed, its count zeroed: a hand
// edit, a partial restore) is an error to read, never a record with an
// empty body, which a replay would send as the answer.
func TestDamagedChunkReference(t *testing.T) {
	store, client, names := newStore(t)
	table := names.ByLogicalID["IdempotencyTable"]
	body := make([]byte, 1<<20)
	if _, err := rand.Read(body); err != nil { // incompressible: stored in chunks
		t.Fatal(err)
	}
	damages := map[string]*dynamodb.UpdateItemInput{
		"chunk id removed": {UpdateExpression: aws.String("REMOVE " + dynamo.AttrResponseChunkID)},
		"checksum removed": {UpdateExpression: aws.String("REMOVE " + dynamo.AttrResponseSHA256)},
		"count zeroed": {UpdateExpression: aws.String("SET " + dynamo.AttrResponseChunks + " = :z"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":z": &types.AttributeValueMemberN{Value: "0"}}},
	}
	for name, upd := range damages {
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			key := idempotency.NewKey("acme", "damaged-"+name)
			rec := completedRecord(key, "lease-1", now.Add(time.Hour))
			rec.Response.Body = body
			if err := store.Commit(t.Context(), rec, nil, now); err != nil {
				t.Fatal(err)
			}
			got, err := store.Get(t.Context(), key)
			if err != nil || got.Response == nil || !bytes.Equal(got.Response.Body, body) {
				t.Fatalf("Get before the damage = %v, want the stored body", err)
			}
			upd.TableName = aws.String(table)
			upd.Key = map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: key.ID()}}
			if _, err := client.UpdateItem(t.Context(), upd); err != nil {
				t.Fatal(err)
			}
			got, err = store.Get(t.Context(), key)
			if err == nil {
				n := -1
				if got.Response != nil {
					n = len(got.Response.Body)
				}
				t.Fatalf("Get with the chunk reference damaged = %s record with a %d-byte body, nil; want an error", got.Status, n)
			}
		})
	}
}
