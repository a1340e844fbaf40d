package stream

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
)

// Process applies fn to the records of ev in order and returns the response a
// stream handler gives Lambda. It stops at the first record for which fn
// fails, or before the first record it reaches after ctx is done, and reports
// that record and every later record of the batch as batch item failures.
//
// Lambda resumes the shard from the lowest failed sequence number, so the
// later records are redelivered anyway; applying them now would apply them
// out of order (before the failed record of the same item) and again on the
// retry. fn must be idempotent, as streams deliver at least once, and should
// log its own errors: the response carries only sequence numbers.
func Process(ctx context.Context, ev events.DynamoDBEvent, fn func(ctx context.Context, rec events.DynamoDBEventRecord) error) events.DynamoDBEventResponse {
	for i, rec := range ev.Records {
		if ctx.Err() == nil && fn(ctx, rec) == nil {
			continue
		}
		failures := make([]events.DynamoDBBatchItemFailure, 0, len(ev.Records)-i)
		for _, r := range ev.Records[i:] {
			failures = append(failures, events.DynamoDBBatchItemFailure{ItemIdentifier: r.Change.SequenceNumber})
		}
		return events.DynamoDBEventResponse{BatchItemFailures: failures}
	}
	return events.DynamoDBEventResponse{}
}
