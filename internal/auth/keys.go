package auth

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/internal/tenant"
)

// ErrUnknownKey is returned by Keys.Lookup for a key that is not in the table.
var ErrUnknownKey = errors.New("auth: unknown API key")

// Attribute names of the ApiKeysTable.
const (
	attrPK      = "pk"
	attrTenant  = "tenant"
	attrCreated = "created"
)

// LookupAPI is the part of the DynamoDB API that Keys uses.
type LookupAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Keys finds the tenant of an API key in the ApiKeysTable.
type Keys struct {
	api   LookupAPI
	table string
}

// NewKeys returns Keys reading table through api.
func NewKeys(api LookupAPI, table string) *Keys {
	return &Keys{api: api, table: table}
}

// Lookup returns the tenant that apiKey belongs to. It returns ErrUnknownKey
// when the table has no such key, and another error when the table cannot be
// read or holds an invalid item: callers must not treat those as a known key.
func (k *Keys) Lookup(ctx context.Context, apiKey string) (string, error) {
	if apiKey == "" {
		return "", ErrUnknownKey
	}
	out, err := k.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(k.table),
		Key: map[string]types.AttributeValue{
			attrPK: &types.AttributeValueMemberS{Value: Hash(apiKey)},
		},
		ProjectionExpression:     aws.String("#t"),
		ExpressionAttributeNames: map[string]string{"#t": attrTenant},
	})
	if err != nil {
		return "", fmt.Errorf("auth: look up key %s: %w", ShortHash(apiKey), err)
	}
	if out.Item == nil {
		return "", ErrUnknownKey
	}
	s, ok := out.Item[attrTenant].(*types.AttributeValueMemberS)
	if !ok || !tenant.Valid(s.Value) {
		return "", fmt.Errorf("auth: key %s: item has no valid tenant", ShortHash(apiKey))
	}
	return s.Value, nil
}

// SeedAPI is the part of the DynamoDB API that Seed uses.
type SeedAPI interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// ErrKeyTaken is returned by Seed when a key is already stored for another
// tenant.
var ErrKeyTaken = errors.New("auth: API key already belongs to another tenant")

// Seed stores each pair in table, hashed. It is idempotent: a key already
// stored for the same tenant keeps its creation time. A key stored for
// another tenant is not overwritten; Seed returns ErrKeyTaken.
func Seed(ctx context.Context, api SeedAPI, table string, pairs []Pair) error {
	now := strconv.FormatInt(time.Now().Unix(), 10)
	for _, p := range pairs {
		if !tenant.Valid(p.Tenant) {
			return fmt.Errorf("auth: seed: tenant %q is not a tenant id", p.Tenant)
		}
		if err := checkKey(p.Key); err != nil {
			return fmt.Errorf("auth: seed: tenant %q: %w", p.Tenant, err)
		}
		_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table),
			Key: map[string]types.AttributeValue{
				attrPK: &types.AttributeValueMemberS{Value: Hash(p.Key)},
			},
			UpdateExpression:    aws.String("SET #t = :t, #c = if_not_exists(#c, :c)"),
			ConditionExpression: aws.String("attribute_not_exists(#pk) OR #t = :t"),
			ExpressionAttributeNames: map[string]string{
				"#pk": attrPK, "#t": attrTenant, "#c": attrCreated,
			},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":t": &types.AttributeValueMemberS{Value: p.Tenant},
				":c": &types.AttributeValueMemberN{Value: now},
			},
		})
		var failed *types.ConditionalCheckFailedException
		if errors.As(err, &failed) {
			return fmt.Errorf("auth: seed key %s for tenant %q: %w", ShortHash(p.Key), p.Tenant, ErrKeyTaken)
		}
		if err != nil {
			return fmt.Errorf("auth: seed key %s for tenant %q: %w", ShortHash(p.Key), p.Tenant, err)
		}
	}
	return nil
}
