package dynamo_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/dynamotest"
)

// TestAdvanceKeepsTTLAhead: a multi-step request of a route that is not
// External taken over (or advanced) long after it was reserved runs under
// a new lease; the TTL attribute must stay a day past that lease
// (dynamo.ReservationTTLMargin), or DynamoDB's TTL may delete the record
// while its new owner holds it, and free its key for a second execution.
// (An External reservation has no TTL attribute: TestExternalCarriesNoTTL.)
func TestAdvanceKeepsTTLAhead(t *testing.T) {
	store, client, names := newStore(t)
	ttlOff(t, client, names.ByLogicalID["IdempotencyTable"]) // the reservation's TTL is past
	now := time.Now()
	k := idempotency.NewKey("acme", "taken over")
	reserved := now.Add(-25 * time.Hour)
	rec := reservedRecord(k, "lease-1", reserved.Add(30*time.Second))
	rec.Point, rec.CreatedAt, rec.UpdatedAt = "order_created", reserved, reserved
	if err := store.Reserve(t.Context(), rec, nil, reserved); err != nil {
		t.Fatalf("Reserve = %v", err)
	}
	lease := now.Add(30 * time.Second)
	p := idempotency.Progress{From: "order_created", Point: "order_created", LeaseToken: "lease-2", ExpiresAt: lease, UpdatedAt: now}
	if err := store.Advance(t.Context(), k, "lease-1", p, nil); err != nil {
		t.Fatalf("Advance = %v", err)
	}
	item := dynamotest.Item(t, client, names.ByLogicalID["IdempotencyTable"], k.ID())
	ttl, err := strconv.ParseInt(attrText(item[dynamo.AttrExpiresAt]), 10, 64)
	if err != nil {
		t.Fatalf("%s = %v: %v", dynamo.AttrExpiresAt, item[dynamo.AttrExpiresAt], err)
	}
	if want := lease.Add(dynamo.ReservationTTLMargin).Unix(); ttl < want {
		t.Errorf("%s = %s after Advance, want at least %s (the new lease + %v)", dynamo.AttrExpiresAt,
			time.Unix(ttl, 0).UTC(), time.Unix(want, 0).UTC(), dynamo.ReservationTTLMargin)
	}
}

// ttlOff turns TTL off on table: the emulator's deletes expired items
// within seconds, and a test that writes records already past their TTL
// needs them to stay.
func ttlOff(t *testing.T, client *dynamodb.Client, table string) {
	t.Helper()
	if _, err := client.UpdateTimeToLive(t.Context(), &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(dynamo.AttrExpiresAt), Enabled: aws.Bool(false),
		},
	}); err != nil {
		t.Fatalf("UpdateTimeToLive(%s, off): %v", table, err)
	}
}
