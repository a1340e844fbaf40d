package receipts

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/outbox"
)

// Attribute names of a job item (outbox.Job) that the sender writes.
var jobNames = map[string]string{
	"#pk": outbox.KeyAttr, "#state": "state", "#claim": "claim", "#until": "claim_until", "#attempts": "attempts",
	"#error": "last_error", "#sent": "sent_at", "#expires": outbox.TTLAttr, "#message": "message", "#order_pk": "order_pk",
}

func jobKey(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{outbox.KeyAttr: &types.AttributeValueMemberS{Value: pk}}
}

func names(keys ...string) map[string]string {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = jobNames[k]
	}
	return out
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func num(n int64) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(n)} }

// conditionFailed is a transaction's cancellation reason for an item whose
// condition failed.
const conditionFailed = "ConditionalCheckFailed"

// errMissing: the job is not in the outbox (never written, or deleted by
// TTL a week after it was sent).
var errMissing = errors.New("receipts: the job is not in the outbox")

// claim claims the job pk for one send: the conditional write before
// sending. It returns the claim's token and the job as claimed, or "" and
// the job as it stands when it is sent or held by a live claim, or an error
// wrapping errMissing.
func (s *Sender) claim(ctx context.Context, pk string) (string, outbox.Job, error) {
	now := s.cfg.Now()
	token := idempotency.NewToken()
	out, err := s.cfg.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.cfg.Outbox),
		Key:              jobKey(pk),
		UpdateExpression: aws.String("SET #state = :sending, #claim = :token, #until = :until ADD #attempts :one"),
		ConditionExpression: aws.String("attribute_exists(#pk) AND (#state IN (:queued, :failed) OR " +
			"(#state = :sending AND #until <= :now))"),
		ExpressionAttributeNames: names("#pk", "#state", "#claim", "#until", "#attempts"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":sending": str(string(outbox.Sending)), ":queued": str(string(outbox.Queued)), ":failed": str(string(outbox.Failed)),
			":token": str(token), ":until": num(now.Add(s.cfg.ClaimFor).UnixMilli()), ":now": num(now.UnixMilli()), ":one": num(1),
		},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	var current outbox.Job
	switch {
	case errors.As(err, &failed) && len(failed.Item) == 0:
		return "", outbox.Job{}, fmt.Errorf("%w (%s)", errMissing, pk)
	case errors.As(err, &failed):
		if err := attributevalue.UnmarshalMap(failed.Item, &current); err != nil {
			return "", outbox.Job{}, fmt.Errorf("receipts: claim: %w", err)
		}
		if current.Claim == token {
			// The SDK retried the write after it had landed: the claim is
			// ours.
			return token, current, nil
		}
		return "", current, nil
	case err != nil:
		return "", outbox.Job{}, fmt.Errorf("receipts: claim: %w", err)
	}
	if err := attributevalue.UnmarshalMap(out.Attributes, &current); err != nil {
		return "", outbox.Job{}, fmt.Errorf("receipts: claim: %w", err)
	}
	return token, current, nil
}

// sent records the send: the job sent (fenced on the claim, whether or not
// it has run out, and on job.OrderPK being the job's order), kept for
// KeepSent, and the order's receipt sent, in one transaction. Its error
// wraps the *types.TransactionCanceledException of a failed condition, the
// job's reason carrying the job as it stands.
func (s *Sender) sent(ctx context.Context, job outbox.Job, claim, messageID string) error {
	now := s.cfg.Now()
	_, err := s.cfg.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                aws.String(s.cfg.Outbox),
			Key:                      jobKey(job.PK),
			UpdateExpression:         aws.String("SET #state = :sent, #sent = :at, #expires = :expires, #message = :message REMOVE #claim, #until"),
			ConditionExpression:      aws.String("#claim = :token AND #order_pk = :order"),
			ExpressionAttributeNames: names("#state", "#sent", "#expires", "#message", "#claim", "#until", "#order_pk"),
			// On a failed condition, the job as it stands: sent by this
			// very message (an earlier try landed), claimed or sent by
			// another attempt, or of another order.
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":sent": str(string(outbox.Sent)), ":at": num(now.Unix()), ":expires": num(now.Add(s.cfg.KeepSent).Unix()),
				":message": str(messageID), ":token": str(claim), ":order": str(job.OrderPK),
			},
		}},
		{Update: &types.Update{
			TableName:                aws.String(s.cfg.Orders),
			Key:                      map[string]types.AttributeValue{outbox.KeyAttr: str(job.OrderPK)},
			UpdateExpression:         aws.String("SET #receipt = :sent, #sent_at = :at"),
			ConditionExpression:      aws.String("attribute_exists(#pk)"),
			ExpressionAttributeNames: map[string]string{"#pk": outbox.KeyAttr, "#receipt": outbox.OrderReceipt, "#sent_at": outbox.OrderReceiptSentAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":sent": str(outbox.ReceiptSent), ":at": num(now.Unix()),
			},
		}},
	}})
	if err != nil {
		return fmt.Errorf("receipts: record the send of message %s: %w", messageID, err)
	}
	return nil
}

// release gives the claim of a failed attempt up: the job is failed, with
// why, and a redelivery may claim it at once.
func (s *Sender) release(ctx context.Context, job outbox.Job, claim string, cause error) error {
	_, err := s.cfg.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.cfg.Outbox),
		Key:                      jobKey(job.PK),
		UpdateExpression:         aws.String("SET #state = :failed, #error = :error REMOVE #claim, #until"),
		ConditionExpression:      aws.String("#claim = :token"),
		ExpressionAttributeNames: names("#state", "#error", "#claim", "#until"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":failed": str(string(outbox.Failed)), ":error": str(cause.Error()), ":token": str(claim),
		},
	})
	if err != nil {
		return fmt.Errorf("receipts: release: %w", err)
	}
	return nil
}
