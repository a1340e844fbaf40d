package dynamo_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
)

// TestReclaimCheck: ReclaimCheck passes exactly when Reserve may take the
// key (Record.Reclaimable, or no record), and returns the record when it
// fails.
func TestReclaimCheck(t *testing.T) {
	s, client, names := newStore(t)
	table := names.ByLogicalID["IdempotencyTable"]
	ttlOff(t, client, table) // expired records stay, as on AWS for a while
	now := time.Now()
	tests := []struct {
		name     string
		status   idempotency.Status // "": no record
		external bool
		expires  time.Duration // from now
		free     bool
	}{
		{name: "no record", free: true},
		{"COMPLETED, expired", idempotency.StatusCompleted, false, -time.Minute, true},
		{"COMPLETED, within its retention", idempotency.StatusCompleted, false, time.Hour, false},
		{"reservation, expired", idempotency.StatusInProgress, false, -time.Minute, true},
		{"reservation, live", idempotency.StatusInProgress, false, time.Minute, false},
		{"External reservation, expired", idempotency.StatusInProgress, true, -time.Minute, false},
		{"External reservation, live", idempotency.StatusInProgress, true, time.Minute, false},
		{"UNKNOWN, expired", idempotency.StatusUnknown, true, -time.Minute, false},
		{"UNKNOWN", idempotency.StatusUnknown, true, time.Hour, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := idempotency.NewKey("acme", fmt.Sprintf("reclaim-%d", i))
			var rec idempotency.Record
			if tt.status != "" {
				rec = reservedRecord(key, "lease", now.Add(tt.expires))
				if tt.status == idempotency.StatusCompleted {
					rec = completedRecord(key, "", now.Add(tt.expires))
				}
				rec.Status, rec.External = tt.status, tt.external
				if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: dynamo.ItemFromRecord(rec)}); err != nil {
					t.Fatal(err)
				}
				if got := rec.Reclaimable(now); got != tt.free {
					t.Fatalf("Reclaimable = %v, want %v", got, tt.free)
				}
			}
			// The check with a write of its own, as a caller uses it.
			check := dynamo.ReclaimCheck(table, key, now)
			_, err := client.TransactWriteItems(t.Context(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{ConditionCheck: &check},
				{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{
					dynamo.AttrPK: &types.AttributeValueMemberS{Value: key.ID() + "#probe"}}}},
			}})
			var cancelled *types.TransactionCanceledException
			switch {
			case tt.free && err != nil:
				t.Errorf("ReclaimCheck = %v, want it to pass", err)
			case !tt.free && !errors.As(err, &cancelled):
				t.Errorf("ReclaimCheck = %v, want the transaction cancelled", err)
			case !tt.free:
				r := cancelled.CancellationReasons[0]
				got, derr := dynamo.RecordFromItem(r.Item)
				if aws.ToString(r.Code) != "ConditionalCheckFailed" || derr != nil || got.Status != tt.status {
					t.Errorf("cancellation %s, record %s (%v), want ConditionalCheckFailed with the %s record", aws.ToString(r.Code), got.Status, derr, tt.status)
				}
			}
			// Reserve, under the store's condition, agrees.
			err = s.Reserve(t.Context(), reservedRecord(key, "new", now.Add(time.Hour)), nil, now)
			var conflict *idempotency.ConflictError
			if reserved := err == nil; reserved != tt.free || err != nil && !errors.As(err, &conflict) {
				t.Errorf("Reserve = %v, want it to take the key: %v", err, tt.free)
			}
		})
	}
}
