package simulator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableAPI is the part of the DynamoDB client the simulator uses;
// *dynamodb.Client implements it.
type TableAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

const (
	kindCharge  = "charge"
	kindPointer = "charge_id"
	kindFlaky   = "flaky"
	// recordAttempts bounds the transactions tried for one charge when
	// concurrent transactions on the same key cancel each other.
	recordAttempts = 8

	conditionFailed = "ConditionalCheckFailed"
)

// chargeItem is the DynamoDB form of a charge.
type chargeItem struct {
	PK             string            `dynamodbav:"pk"`
	Kind           string            `dynamodbav:"kind"`
	ID             string            `dynamodbav:"id"`
	Status         string            `dynamodbav:"status"`
	Amount         int64             `dynamodbav:"amount"`
	Currency       string            `dynamodbav:"currency"`
	Source         string            `dynamodbav:"source"`
	Customer       string            `dynamodbav:"customer"`
	Description    string            `dynamodbav:"description,omitempty"`
	Metadata       map[string]string `dynamodbav:"metadata,omitempty"`
	FailureCode    string            `dynamodbav:"failure_code,omitempty"`
	FailureMessage string            `dynamodbav:"failure_message,omitempty"`
	Params         string            `dynamodbav:"params"`
	ResponseStatus int               `dynamodbav:"response_status"`
	ResponseBody   []byte            `dynamodbav:"response_body"`
	ChargeCount    int               `dynamodbav:"charge_count"`
	Created        int64             `dynamodbav:"created"`
	// Refunded and RefundKeys are written by refunds (recordRefund).
	Refunded   int64    `dynamodbav:"refunded,omitempty"`
	RefundKeys []string `dynamodbav:"refund_keys,stringset,omitempty"`
}

// pointerItem leads from a charge id to the charge's key.
type pointerItem struct {
	PK   string `dynamodbav:"pk"`
	Kind string `dynamodbav:"kind"`
	Key  string `dynamodbav:"key"`
}

func toItem(c charge) chargeItem {
	return chargeItem{
		PK: c.Key, Kind: kindCharge, ID: c.ID, Status: c.Status,
		Amount: c.Amount, Currency: c.Currency, Source: c.Source, Customer: c.Customer,
		Description: c.Description, Metadata: c.Metadata,
		FailureCode: c.FailureCode, FailureMessage: c.FailureMessage,
		Params: c.Params, ResponseStatus: c.ResponseStatus, ResponseBody: c.ResponseBody,
		ChargeCount: c.Count, Created: c.Created.Unix(),
	}
}

func fromItem(it chargeItem) charge {
	return charge{
		Key: it.PK, ID: it.ID, Status: it.Status,
		Amount: it.Amount, Currency: it.Currency, Source: it.Source, Customer: it.Customer,
		Description: it.Description, Metadata: it.Metadata,
		FailureCode: it.FailureCode, FailureMessage: it.FailureMessage,
		Params: it.Params, ResponseStatus: it.ResponseStatus, ResponseBody: it.ResponseBody,
		Count: it.ChargeCount, Created: time.Unix(it.Created, 0),
		Refunded: it.Refunded, RefundKeys: it.RefundKeys,
	}
}

// errBusy: concurrent transactions on the key kept cancelling ours, and no
// charge was found either; nothing of ours was written.
var errBusy = errors.New("simulator: the key stays contended")

// record writes the charge that build makes under key, unless a charge
// already exists for key. It returns the charge now recorded for key and
// whether this call created it. build is called again when the charge id it
// chose is taken. An error means the write may or may not have happened,
// except errBusy.
func (s *Server) record(ctx context.Context, key string, build func() charge) (charge, bool, error) {
	for attempt := 1; ; attempt++ {
		c := build()
		err := s.put(ctx, c)
		if err == nil {
			return c, true, nil
		}
		var canceled *types.TransactionCanceledException
		if !errors.As(err, &canceled) {
			return charge{}, false, err
		}
		if idTaken(canceled.CancellationReasons) && attempt < recordAttempts {
			continue // never happens with 96 random bits, but a fresh id settles it
		}
		// The key is taken or contended: whoever won has recorded the charge,
		// or is about to.
		existing, found, err := s.get(ctx, key)
		if err != nil {
			return charge{}, false, err
		}
		if found {
			return existing, false, nil
		}
		if attempt >= recordAttempts {
			return charge{}, false, errBusy
		}
		if err := sleep(ctx, time.Duration(5+rand.IntN(20*attempt))*time.Millisecond); err != nil {
			return charge{}, false, err
		}
	}
}

// idTaken reports whether a transaction failed only because the pointer
// item of its charge id exists.
func idTaken(reasons []types.CancellationReason) bool {
	return len(reasons) == 2 &&
		aws.ToString(reasons[0].Code) != conditionFailed &&
		aws.ToString(reasons[1].Code) == conditionFailed
}

func (s *Server) put(ctx context.Context, c charge) error {
	item, err := attributevalue.MarshalMap(toItem(c))
	if err != nil {
		return fmt.Errorf("simulator: marshal charge: %w", err)
	}
	pointer, err := attributevalue.MarshalMap(pointerItem{PK: pointerKeyPrefix + c.ID, Kind: kindPointer, Key: c.Key})
	if err != nil {
		return fmt.Errorf("simulator: marshal pointer: %w", err)
	}
	notExists := aws.String("attribute_not_exists(pk)")
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: &s.table, Item: item, ConditionExpression: notExists}},
			{Put: &types.Put{TableName: &s.table, Item: pointer, ConditionExpression: notExists}},
		},
	})
	return err
}

// get reads the charge recorded under key, consistently.
func (s *Server) get(ctx context.Context, key string) (charge, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return charge{}, false, fmt.Errorf("simulator: get charge: %w", err)
	}
	if out.Item == nil {
		return charge{}, false, nil
	}
	var it chargeItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return charge{}, false, fmt.Errorf("simulator: unmarshal charge: %w", err)
	}
	if it.Kind != kindCharge {
		return charge{}, false, nil
	}
	return fromItem(it), true, nil
}

// getByID reads the charge with the given id through its pointer item.
func (s *Server) getByID(ctx context.Context, id string) (charge, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pointerKeyPrefix + id}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return charge{}, false, fmt.Errorf("simulator: get charge id: %w", err)
	}
	if out.Item == nil {
		return charge{}, false, nil
	}
	var p pointerItem
	if err := attributevalue.UnmarshalMap(out.Item, &p); err != nil {
		return charge{}, false, fmt.Errorf("simulator: unmarshal pointer: %w", err)
	}
	if p.Kind != kindPointer {
		return charge{}, false, nil
	}
	return s.get(ctx, p.Key)
}

// flakyItem remembers when tok_flaky first saw a key.
type flakyItem struct {
	PK    string `dynamodbav:"pk"`
	Kind  string `dynamodbav:"kind"`
	First int64  `dynamodbav:"first"` // unix milliseconds
}

// firstSeen returns when a tok_flaky request first came with key, recording
// now when none did.
func (s *Server) firstSeen(ctx context.Context, key string) (time.Time, error) {
	pk := flakyKeyPrefix + key
	item, err := attributevalue.MarshalMap(flakyItem{PK: pk, Kind: kindFlaky, First: s.now().UnixMilli()})
	if err != nil {
		return time.Time{}, fmt.Errorf("simulator: marshal flaky marker: %w", err)
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: &s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
	}})
	var canceled *types.TransactionCanceledException
	if err != nil && !errors.As(err, &canceled) {
		return time.Time{}, fmt.Errorf("simulator: record flaky marker: %w", err)
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("simulator: get flaky marker: %w", err)
	}
	var it flakyItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil || it.Kind != kindFlaky {
		return time.Time{}, fmt.Errorf("simulator: flaky marker of the key is missing or malformed: %v", err)
	}
	return time.UnixMilli(it.First), nil
}

// Count returns the number of charges created with key: 0 or 1, since the
// simulator never charges a key twice.
func (s *Server) Count(ctx context.Context, key string) (int, error) {
	c, found, err := s.get(ctx, key)
	if err != nil || !found {
		return 0, err
	}
	return c.Count, nil
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
