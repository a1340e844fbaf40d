package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
)

// Errors of Table.
var (
	// ErrNotFound: no such payment for the tenant (404 not_found, the answer
	// of httpapi.ErrNotFound, declared here so that the worker, which reads
	// payments, links no HTTP package).
	ErrNotFound = fmt.Errorf("payments: payment not found: %w",
		problem.New(http.StatusNotFound, "not_found", "Not found", "No such resource."))
	// ErrNotPending: the payment is already settled (see *NotPendingError).
	ErrNotPending = errors.New("payments: payment is not pending")
	// ErrUnavailable: DynamoDB could not be reached or throttled the request
	// after the SDK's bounded retries (503 store_unavailable).
	ErrUnavailable = fmt.Errorf("payments: table unavailable: %w", idempotency.ErrUnavailable)
)

// NotPendingError reports a Settle of a payment that is no longer pending,
// with the payment as stored. It matches ErrNotPending.
type NotPendingError struct {
	Payment Payment
}

// Error describes the conflict.
func (e *NotPendingError) Error() string {
	return fmt.Sprintf("payments: payment %s is %s, not pending", e.Payment.ID, e.Payment.Status)
}

// Is makes errors.Is(err, ErrNotPending) true.
func (e *NotPendingError) Is(target error) bool { return target == ErrNotPending }

// Client is the part of the DynamoDB API that Table uses.
type Client interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Table reads and settles payments in the payments table. New payments are
// written as idempotency effects (Effect), not through Table.
type Table struct {
	client Client
	name   string
}

// NewTable returns the payments table name accessed through client.
func NewTable(client Client, name string) *Table {
	return &Table{client: client, name: name}
}

// Name is the table's name.
func (t *Table) Name() string { return t.name }

// Get returns tenant's payment id, read consistently. It returns an error
// wrapping ErrNotFound when there is none (including when id belongs to
// another tenant) and one wrapping ErrUnavailable when DynamoDB could not
// answer.
func (t *Table) Get(ctx context.Context, tenant, id string) (Payment, error) {
	out, err := t.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(t.name),
		Key:            key(tenant, id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Payment{}, fmt.Errorf("payments: get: %w", Classify(err))
	}
	if out.Item == nil {
		return Payment{}, fmt.Errorf("payments: get %s: %w", id, ErrNotFound)
	}
	var p Payment
	if err := attributevalue.UnmarshalMap(out.Item, &p); err != nil {
		return Payment{}, fmt.Errorf("payments: get %s: %w", id, err)
	}
	return p, nil
}

// Settle moves tenant's pending payment id to status (succeeded, with the
// provider's chargeID, and then its whole amount refundable; or failed, with
// a failureCode). It returns a *NotPendingError when the payment is already
// settled, and errors wrapping ErrNotFound or ErrUnavailable as Get does.
func (t *Table) Settle(ctx context.Context, tenant, id string, status Status, chargeID, failureCode string) error {
	switch {
	case status == StatusSucceeded && chargeID == "":
		return errors.New("payments: settle: a succeeded payment needs a charge ID")
	case status == StatusFailed && failureCode == "":
		return errors.New("payments: settle: a failed payment needs a failure code")
	case status != StatusSucceeded && status != StatusFailed:
		return fmt.Errorf("payments: settle: cannot settle to %q", status)
	}
	update := "SET #status = :status"
	values := map[string]types.AttributeValue{
		":status":  &types.AttributeValueMemberS{Value: string(status)},
		":pending": &types.AttributeValueMemberS{Value: string(StatusPending)},
	}
	names := map[string]string{"#status": AttrStatus}
	if chargeID != "" {
		update += ", provider_charge_id = :charge"
		values[":charge"] = &types.AttributeValueMemberS{Value: chargeID}
	}
	if status == StatusSucceeded {
		// Refundable from now on (see Payment.Refundable).
		update += ", #refundable = #amount, #refunded = :zero, #holds = :none"
		names["#refundable"], names["#amount"], names["#refunded"], names["#holds"] = AttrRefundable, AttrAmount, AttrAmountRefunded, AttrHolds
		values[":zero"] = &types.AttributeValueMemberN{Value: "0"}
		values[":none"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
	}
	if failureCode != "" {
		update += ", failure_code = :failure"
		values[":failure"] = &types.AttributeValueMemberS{Value: failureCode}
	}
	_, err := t.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(t.name),
		Key:                                 key(tenant, id),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String("#status = :pending"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed) && failed.Item == nil:
		return fmt.Errorf("payments: settle %s: %w", id, ErrNotFound)
	case errors.As(err, &failed):
		var p Payment
		if err := attributevalue.UnmarshalMap(failed.Item, &p); err != nil {
			return fmt.Errorf("payments: settle %s: %w", id, err)
		}
		return &NotPendingError{Payment: p}
	case err != nil:
		return fmt.Errorf("payments: settle %s: %w", id, Classify(err))
	}
	return nil
}

func key(tenant, id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{KeyAttr: &types.AttributeValueMemberS{Value: PK(tenant, id)}}
}

// Classify wraps ErrUnavailable (which answers 503 store_unavailable) around
// err, an error of a DynamoDB call, unless DynamoDB refused the request
// itself (a missing table, a malformed request, denied access): those are
// bugs or misconfiguration, not outages, and retrying will not help. Other
// domains' tables classify their errors with it too.
func Classify(err error) error {
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorFault() == smithy.FaultClient {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "RequestLimitExceeded", "ThrottlingException":
		default:
			return err
		}
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
