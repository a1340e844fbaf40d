package dynamo

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
)

// Put writes Item into Table, replacing any item with its key unless
// Condition says otherwise. Insert is the common case. The fields of Put,
// Update, Delete and Check are those of the TransactWriteItems request (see
// Effects in the package documentation).
type Put struct {
	// Table is the table written.
	Table string
	// Item is the item: a struct with dynamodbav tags, a map, or a
	// map[string]types.AttributeValue.
	Item any
	// Condition is a DynamoDB condition expression on the item as it
	// stands ("" for none).
	Condition string
	// Names maps the expressions' #name placeholders to attribute names.
	Names map[string]string
	// Values maps the expressions' :value placeholders to values: any Go
	// value (marshalled with attributevalue.Marshal) or a
	// types.AttributeValue.
	Values map[string]any
	// Reject, when set, is called when Condition fails, with the item as it
	// stands (nil when there is none): its error is the request's business
	// answer, stored when it is a 4xx. Without it a failed condition is a
	// 500.
	Reject func(current map[string]types.AttributeValue) error
}

// Update applies the update expression Update ("SET #n = #n + :amount") to
// the item with Key in Table (creating it when absent, as UpdateItem does,
// unless Condition forbids that).
type Update struct {
	// Table is the table written.
	Table string
	// Key is the item's primary key, attribute by attribute, each value
	// marshalled as Put's Values are.
	Key map[string]any
	// Update is the update expression.
	Update string
	// Condition, Names, Values and Reject are as in Put.
	Condition string
	Names     map[string]string
	Values    map[string]any
	Reject    func(current map[string]types.AttributeValue) error
}

// Delete deletes the item with Key from Table.
type Delete struct {
	// Table is the table written.
	Table string
	// Key is the item's primary key, as in Update.
	Key map[string]any
	// Condition, Names, Values and Reject are as in Put.
	Condition string
	Names     map[string]string
	Values    map[string]any
	Reject    func(current map[string]types.AttributeValue) error
}

// Check conditions the transaction on the item with Key in Table, writing
// nothing.
type Check struct {
	// Table is the table of the item checked.
	Table string
	// Key is the item's primary key, as in Update.
	Key map[string]any
	// Condition is required; Condition, Names, Values and Reject are as in
	// Put.
	Condition string
	Names     map[string]string
	Values    map[string]any
	Reject    func(current map[string]types.AttributeValue) error
}

// EffectTable names the effect's table.
func (p Put) EffectTable() string { return p.Table }

// EffectTable names the effect's table.
func (u Update) EffectTable() string { return u.Table }

// EffectTable names the effect's table.
func (d Delete) EffectTable() string { return d.Table }

// EffectTable names the effect's table.
func (c Check) EffectTable() string { return c.Table }

// Insert is a Put of item into table that requires that no item with its
// partition key keyAttr exists: a new business item (a payment, a refund).
// An item already there fails the write with a 500, not a rejection: it means
// an ID was drawn twice.
func Insert(table, keyAttr string, item any) Put {
	return Put{
		Table:     table,
		Item:      item,
		Condition: "attribute_not_exists(#insert_key)",
		Names:     map[string]string{"#insert_key": keyAttr},
	}
}

// transactor is implemented by the effects the Store commits. Each effect
// type translates itself, so that code which never builds an effect of a
// kind does not reach that kind's DynamoDB action (internal/deploytest holds
// each function's IAM grants to what its code can reach).
type transactor interface {
	// transactItem is the effect as one item of a TransactWriteItems, and
	// its Reject.
	transactItem() (types.TransactWriteItem, func(map[string]types.AttributeValue) error, error)
}

// transactItem is e as one item of a TransactWriteItems, and e's Reject.
func transactItem(e idempotency.Effect) (types.TransactWriteItem, func(map[string]types.AttributeValue) error, error) {
	t, ok := e.(transactor)
	if !ok {
		return types.TransactWriteItem{}, nil, fmt.Errorf("effect %T is not one of the DynamoDB store's (dynamo.Put, Update, Delete, Check)", e)
	}
	return t.transactItem()
}

func (e Put) transactItem() (types.TransactWriteItem, func(map[string]types.AttributeValue) error, error) {
	item, err := marshalItem(e.Item)
	if err != nil {
		return types.TransactWriteItem{}, nil, err
	}
	values, err := marshalValues(e.Values)
	if err != nil {
		return types.TransactWriteItem{}, nil, err
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                           aws.String(e.Table),
		Item:                                item,
		ConditionExpression:                 optional(e.Condition),
		ExpressionAttributeNames:            e.Names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: returnOld(e.Reject),
	}}, e.Reject, nil
}

func (e Update) transactItem() (types.TransactWriteItem, func(map[string]types.AttributeValue) error, error) {
	key, values, err := marshalKeyValues(e.Key, e.Values)
	if err != nil {
		return types.TransactWriteItem{}, nil, err
	}
	if e.Update == "" {
		return types.TransactWriteItem{}, nil, fmt.Errorf("update of %s without an update expression", e.Table)
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                           aws.String(e.Table),
		Key:                                 key,
		UpdateExpression:                    aws.String(e.Update),
		ConditionExpression:                 optional(e.Condition),
		ExpressionAttributeNames:            e.Names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: returnOld(e.Reject),
	}}, e.Reject, nil
}

func (e Delete) transactItem() (types.TransactWriteItem, func(map[string]types.AttributeValue) error, error) {
	key, values, err := marshalKeyValues(e.Key, e.Values)
	if err != nil {
		return types.TransactWriteItem{}, nil, err
	}
	return types.TransactWriteItem{Delete: &types.Delete{
		TableName:                           aws.String(e.Table),
		Key:                                 key,
		ConditionExpression:                 optional(e.Condition),
		ExpressionAttributeNames:            e.Names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: returnOld(e.Reject),
	}}, e.Reject, nil
}

func (e Check) transactItem() (types.TransactWriteItem, func(map[string]types.AttributeValue) error, error) {
	key, values, err := marshalKeyValues(e.Key, e.Values)
	if err != nil {
		return types.TransactWriteItem{}, nil, err
	}
	if e.Condition == "" {
		return types.TransactWriteItem{}, nil, fmt.Errorf("check of %s without a condition", e.Table)
	}
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                           aws.String(e.Table),
		Key:                                 key,
		ConditionExpression:                 aws.String(e.Condition),
		ExpressionAttributeNames:            e.Names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: returnOld(e.Reject),
	}}, e.Reject, nil
}

func optional(expr string) *string {
	if expr == "" {
		return nil
	}
	return aws.String(expr)
}

func returnOld(reject func(map[string]types.AttributeValue) error) types.ReturnValuesOnConditionCheckFailure {
	if reject == nil {
		return types.ReturnValuesOnConditionCheckFailureNone
	}
	return types.ReturnValuesOnConditionCheckFailureAllOld
}

func marshalItem(item any) (map[string]types.AttributeValue, error) {
	if m, ok := item.(map[string]types.AttributeValue); ok {
		return m, nil
	}
	m, err := attributevalue.MarshalMap(item)
	if err != nil {
		return nil, fmt.Errorf("marshal item: %w", err)
	}
	return m, nil
}

func marshalKeyValues(key, values map[string]any) (map[string]types.AttributeValue, map[string]types.AttributeValue, error) {
	if len(key) == 0 {
		return nil, nil, fmt.Errorf("an effect without a key")
	}
	k, err := marshalValues(key)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	v, err := marshalValues(values)
	if err != nil {
		return nil, nil, err
	}
	return k, v, nil
}

func marshalValues(values map[string]any) (map[string]types.AttributeValue, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := make(map[string]types.AttributeValue, len(values))
	for name, v := range values {
		if av, ok := v.(types.AttributeValue); ok {
			out[name] = av
			continue
		}
		av, err := attributevalue.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", name, err)
		}
		out[name] = av
	}
	return out, nil
}
