package bench

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
)

// itemOf is an item of about size bytes.
func itemOf(pk string, size int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk},
		"x":  &types.AttributeValueMemberS{Value: strings.Repeat("a", max(0, size-3-len(pk)))},
	}
}

func TestFailedCost(t *testing.T) {
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}
	put := func(size int) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{TableName: aws.String("t"), Item: itemOf("k", size)}}
	}
	update := types.TransactWriteItem{Update: &types.Update{TableName: aws.String("u"), Key: key}}
	tests := []struct {
		name string
		in   any
		err  error
		want cost
	}{
		{
			name: "failed put: the larger of the new and the existing item",
			in:   &dynamodb.PutItemInput{Item: itemOf("k", 500)},
			err:  &types.ConditionalCheckFailedException{Item: itemOf("k", 1500)},
			want: cost{computed: 2},
		},
		{
			name: "failed update of no item: one unit",
			in:   &dynamodb.UpdateItemInput{Key: key},
			err:  &types.ConditionalCheckFailedException{},
			want: cost{computed: 1},
		},
		{
			name: "cancelled transaction: every item, twice; an update sized later",
			in:   &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{put(300), put(2000), update}},
			err: &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{
				{Code: aws.String("ConditionalCheckFailed"), Item: itemOf("k", 3000)}, {Code: aws.String("None")}, {Code: aws.String("None")},
			}},
			want: cost{computed: 2*3 + 2*2, pending: []pendingItem{{table: "u", key: key, factor: 2}}},
		},
		{
			name: "throttled: nothing",
			in:   &dynamodb.PutItemInput{Item: itemOf("k", 500)},
			err:  fmt.Errorf("wrapped: %w", &types.ProvisionedThroughputExceededException{}),
		},
		{
			name: "a network error: nothing",
			in:   &dynamodb.PutItemInput{Item: itemOf("k", 500)},
			err:  errors.New("connection reset"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := failedCost(tt.in, tt.err)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(cost{}, pendingItem{}, types.AttributeValueMemberS{})); diff != "" {
				t.Errorf("failedCost() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSucceededCost(t *testing.T) {
	one := 1.0
	tests := []struct {
		name   string
		op     string
		in     any
		result any
		want   cost
	}{
		{
			name:   "put: the reported units, checked against the item's size",
			op:     "PutItem",
			in:     &dynamodb.PutItemInput{Item: itemOf("k", 1500)},
			result: &dynamodb.PutItemOutput{ConsumedCapacity: &types.ConsumedCapacity{CapacityUnits: &one}},
			want:   cost{wcu: 1, checked: true, below: true},
		},
		{
			name:   "get: read units",
			op:     "GetItem",
			in:     &dynamodb.GetItemInput{},
			result: &dynamodb.GetItemOutput{ConsumedCapacity: &types.ConsumedCapacity{CapacityUnits: &one}},
			want:   cost{rcu: 1},
		},
		{
			name: "transaction: computed, two per KB of each item, a delete one unit",
			op:   "TransactWriteItems",
			in: &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Put: &types.Put{Item: itemOf("a", 100)}},
				{Put: &types.Put{Item: itemOf("b", 1100)}},
				{Delete: &types.Delete{Key: itemOf("c", 0)}},
			}},
			result: &dynamodb.TransactWriteItemsOutput{ConsumedCapacity: []types.ConsumedCapacity{{CapacityUnits: aws.Float64(16), WriteCapacityUnits: aws.Float64(16)}}},
			want:   cost{computed: 2 + 4 + 2, localTxn: 16},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := succeededCost(tt.op, tt.in, tt.result)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(cost{}, pendingItem{})); diff != "" {
				t.Errorf("succeededCost() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		d    []time.Duration
		q    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(3, 1, 2), 0.5, 2 * time.Millisecond},
		{ms(5, 1, 4, 2, 3), 0.99, 5 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := quantile(tt.d, tt.q); got != tt.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", tt.d, tt.q, got, tt.want)
		}
	}
}

func TestWithConsumedCapacity(t *testing.T) {
	in := &dynamodb.TransactWriteItemsInput{ClientRequestToken: aws.String("t")}
	got, ok := withConsumedCapacity(in).(*dynamodb.TransactWriteItemsInput)
	if !ok || got == in || got.ReturnConsumedCapacity != types.ReturnConsumedCapacityTotal || aws.ToString(got.ClientRequestToken) != "t" {
		t.Errorf("withConsumedCapacity(%+v) = %+v, want a copy asking for TOTAL", in, got)
	}
	if in.ReturnConsumedCapacity != "" {
		t.Errorf("the input was changed: %+v", in)
	}
	other := &dynamodb.DescribeTableInput{}
	if got := withConsumedCapacity(other); got != other {
		t.Errorf("withConsumedCapacity(DescribeTableInput) = %v, want it unchanged", got)
	}
}
