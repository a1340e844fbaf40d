package samtemplate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableAPI is the part of the DynamoDB API that Create uses.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Create creates each table (an existing table is left as it is), waits until
// it is active, and enables its TTL attribute.
func Create(ctx context.Context, api TableAPI, tables []Table) error {
	for _, t := range tables {
		name := aws.ToString(t.Input.TableName)
		_, err := api.CreateTable(ctx, t.Input)
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) {
			return fmt.Errorf("samtemplate: create table %s: %w", name, err)
		}
		w := dynamodb.NewTableExistsWaiter(api)
		if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, defaultWait); err != nil {
			return fmt.Errorf("samtemplate: wait for table %s: %w", name, err)
		}
		if t.TTLAttribute == "" {
			continue
		}
		_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName: aws.String(name),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{
				AttributeName: aws.String(t.TTLAttribute),
				Enabled:       aws.Bool(true),
			},
		})
		if err != nil && !strings.Contains(err.Error(), "already enabled") {
			return fmt.Errorf("samtemplate: enable TTL on %s: %w", name, err)
		}
	}
	return nil
}

// defaultWait bounds the wait for a new table to become active.
const defaultWait = 30 * time.Second
