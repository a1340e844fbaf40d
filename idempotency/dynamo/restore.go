package dynamo

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
)

// restoreMarkKey is the partition key of the mark of the restore named id of
// key's record: the record's own, "#restored#" and id, as a chunk's is the
// record's, "#chunk#" and more, so that it never names a record.
func restoreMarkKey(key idempotency.Key, id string) string {
	return key.ID() + "#restored#" + id
}

// RestoreMark returns the effect that marks the restore named id (the
// stream REMOVE it restores from: its event ID) of key's record, for
// recovery.Sweeper: an item of the store's table under its own partition
// key, with only its TTL attribute, expiresAt (no status: no stream handler
// acts on it, no listing shows it). Written with the restore, in Reserve's
// transaction, it makes a restore that landed recognisable for as long as
// the REMOVE may be delivered again, whatever became of the record since
// (released by the reconciler, its key reserved anew): Reserve fails with an
// *idempotency.RejectedError when the mark exists already, and Restored
// reports it.
func (s *Store) RestoreMark(key idempotency.Key, id string, expiresAt time.Time) idempotency.Effect {
	return Insert(s.table, AttrPK, map[string]any{
		AttrPK:        restoreMarkKey(key, id),
		AttrExpiresAt: ceilSeconds(expiresAt.UnixMilli()),
	})
}

// Restored reports whether the restore named id of key's record landed: its
// mark (RestoreMark) exists. One strongly consistent GetItem; errors are
// Get's.
func (s *Store) Restored(ctx context.Context, key idempotency.Key, id string) (bool, error) {
	var out *dynamodb.GetItemOutput
	err := s.do(ctx, func() error {
		var err error
		out, err = s.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:                aws.String(s.table),
			Key:                      map[string]types.AttributeValue{AttrPK: str(restoreMarkKey(key, id))},
			ConsistentRead:           aws.Bool(true),
			ProjectionExpression:     aws.String("#pk"),
			ExpressionAttributeNames: map[string]string{"#pk": AttrPK},
		})
		return err
	})
	if err != nil {
		return false, s.outcome(ctx, "restored", err, nil)
	}
	return len(out.Item) > 0, nil
}
