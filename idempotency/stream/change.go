package stream

import (
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
)

// TTL removals carry this user identity on AWS and on DynamoDB Local.
const (
	ttlIdentityType      = "Service"
	ttlIdentityPrincipal = "dynamodb.amazonaws.com"
)

// ErrNoImage is returned by Change.DecodeOld and Change.DecodeNew when the
// record has no such image: an INSERT has no old image, a REMOVE no new one,
// and a stream that is not NEW_AND_OLD_IMAGES lacks one or both.
var ErrNoImage = errors.New("stream: record has no such image")

// Change is the typed view of one stream record.
type Change struct {
	// EventName is INSERT, MODIFY or REMOVE.
	EventName events.DynamoDBOperationType
	// EventID is unique per record; redeliveries keep it.
	EventID string
	// SequenceNumber orders the records of one shard and is the batch item
	// failure identifier.
	SequenceNumber string
	// Keys, OldImage and NewImage are the item's key attributes and its
	// images before and after the change (nil when the record has none).
	Keys     map[string]events.DynamoDBAttributeValue
	OldImage map[string]events.DynamoDBAttributeValue
	NewImage map[string]events.DynamoDBAttributeValue
	// UserIdentity is set on removals by DynamoDB's TTL process (see ByTTL).
	UserIdentity *events.DynamoDBUserIdentity
}

// NewChange returns the typed view of rec.
func NewChange(rec events.DynamoDBEventRecord) Change {
	return Change{
		EventName:      events.DynamoDBOperationType(rec.EventName),
		EventID:        rec.EventID,
		SequenceNumber: rec.Change.SequenceNumber,
		Keys:           rec.Change.Keys,
		OldImage:       rec.Change.OldImage,
		NewImage:       rec.Change.NewImage,
		UserIdentity:   rec.UserIdentity,
	}
}

// ByTTL reports whether the change is a removal by DynamoDB's TTL process,
// which AWS and DynamoDB Local mark with the user identity
// {type: Service, principalId: dynamodb.amazonaws.com}.
//
// A false result does not prove that a client deleted the item: LocalStack's
// TTL worker emits REMOVE records without a user identity. Use ByTTL for
// logs and metrics, and base decisions on the old image (for idempotency
// records: an expires_at in the past) so that they hold on every emulator.
func (c Change) ByTTL() bool {
	return c.EventName == events.DynamoDBOperationTypeRemove &&
		c.UserIdentity != nil &&
		c.UserIdentity.Type == ttlIdentityType &&
		c.UserIdentity.PrincipalID == ttlIdentityPrincipal
}

// DecodeOld unmarshals the old image into out (a pointer, as for
// attributevalue.UnmarshalMap). It returns ErrNoImage when there is none.
func (c Change) DecodeOld(out any) error {
	return decodeImage("old", c.OldImage, out)
}

// DecodeNew unmarshals the new image into out (a pointer, as for
// attributevalue.UnmarshalMap). It returns ErrNoImage when there is none.
func (c Change) DecodeNew(out any) error {
	return decodeImage("new", c.NewImage, out)
}

func decodeImage(which string, image map[string]events.DynamoDBAttributeValue, out any) error {
	if image == nil {
		return fmt.Errorf("stream: decode %s image: %w", which, ErrNoImage)
	}
	if err := attributevalue.UnmarshalMap(ToSDK(image), out); err != nil {
		return fmt.Errorf("stream: decode %s image: %w", which, err)
	}
	return nil
}
