package stream

import (
	"context"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestAllKeepsWholeBatchFailure: a handler that answers a batch item failure
// naming no record of the batch (an empty ItemIdentifier) fails the whole
// batch in Lambda's semantics; All must not turn it into success.
func TestAllKeepsWholeBatchFailure(t *testing.T) {
	var ev events.DynamoDBEvent
	for _, s := range []string{"1", "2"} {
		ev.Records = append(ev.Records, events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{SequenceNumber: s}})
	}
	ok := func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{}, nil
	}
	whole := func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: ""}}}, nil
	}
	resp, err := All(ok, whole)(t.Context(), ev)
	if err == nil && len(resp.BatchItemFailures) == 0 {
		t.Errorf("All() = success; want the batch failed (a handler reported a failure naming no record)")
	}
}
