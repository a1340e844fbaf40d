package orders

import (
	"context"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/payments"
)

// ErrNotFound: no such order for the tenant (404 not_found, the answer of
// httpapi.ErrNotFound, declared here so that the reconciler, which resumes
// orders, links no HTTP package).
var ErrNotFound = fmt.Errorf("orders: order not found: %w",
	problem.New(http.StatusNotFound, "not_found", "Not found", "No such resource."))

// Getter is the part of the DynamoDB API that Table uses.
type Getter interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Table reads orders. Orders are written only as effects of their request's
// phases.
type Table struct {
	client Getter
	name   string
}

// NewTable returns the orders table name accessed through client.
func NewTable(client Getter, name string) *Table { return &Table{client: client, name: name} }

// Get returns tenant's order id as it stands (a consistent read). It returns
// an error wrapping ErrNotFound when there is none, another tenant's
// included, and one wrapping payments.ErrUnavailable when DynamoDB could not
// answer.
func (t *Table) Get(ctx context.Context, tenant, id string) (Order, error) {
	out, err := t.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(t.name),
		Key:            map[string]types.AttributeValue{KeyAttr: &types.AttributeValueMemberS{Value: PK(tenant, id)}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Order{}, fmt.Errorf("orders: get: %w", payments.Classify(err))
	}
	if out.Item == nil {
		return Order{}, fmt.Errorf("orders: get %s: %w", id, ErrNotFound)
	}
	var o Order
	if err := attributevalue.UnmarshalMap(out.Item, &o); err != nil {
		return Order{}, fmt.Errorf("orders: get %s: %w", id, err)
	}
	return o, nil
}
