package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
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

// RestoreMark returns the effect that marks the stream REMOVE named id
// (its event ID) of key's record, for recovery.Sweeper (a
// recovery.RestoreMarker): an item of the store's table under its own
// partition key, with only its TTL attribute, expiresAt (no status: no
// stream handler acts on it, no listing shows it). Written with a restore,
// in Reserve's transaction, it makes the REMOVE's handling recognisable for
// as long as the REMOVE may be delivered again, whatever became of the
// record since (released by the reconciler, its key reserved anew): Reserve
// fails with an *idempotency.RejectedError when the mark exists already,
// and Marked reports it.
func (s *Store) RestoreMark(key idempotency.Key, id string, expiresAt time.Time) idempotency.Effect {
	return Insert(s.table, AttrPK, restoreMarkItem(key, id, expiresAt))
}

func restoreMarkItem(key idempotency.Key, id string, expiresAt time.Time) map[string]any {
	return map[string]any{
		AttrPK:        restoreMarkKey(key, id),
		AttrExpiresAt: ceilSeconds(expiresAt.UnixMilli()),
	}
}

// Mark writes the mark of the REMOVE named id of key's record (RestoreMark's
// item) on its own, when the Sweeper counted it unrestored: one PutItem
// conditioned on its absence; a mark that exists already is left as it is.
func (s *Store) Mark(ctx context.Context, key idempotency.Key, id string, expiresAt time.Time) error {
	item, err := attributevalue.MarshalMap(restoreMarkItem(key, id, expiresAt))
	if err != nil {
		return fmt.Errorf("dynamo: mark: %w", err)
	}
	in := &dynamodb.PutItemInput{
		TableName:                aws.String(s.table),
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": AttrPK},
	}
	err = s.do(ctx, func() error {
		_, err := s.client.PutItem(ctx, in)
		return err
	})
	var exists *types.ConditionalCheckFailedException
	if errors.As(err, &exists) {
		return nil
	}
	if err != nil && unavailable(err) {
		return fmt.Errorf("dynamo: mark: %w: %w", idempotency.ErrUnavailable, err)
	}
	if err != nil {
		return fmt.Errorf("dynamo: mark: %w", err)
	}
	return nil
}

// Marked reports whether the REMOVE named id of key's record was handled
// before: its mark (RestoreMark, Mark) exists. One strongly consistent
// GetItem; errors are Get's.
func (s *Store) Marked(ctx context.Context, key idempotency.Key, id string) (bool, error) {
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
		return false, s.outcome(ctx, "marked", err, nil)
	}
	return len(out.Item) > 0, nil
}
