package stream

import (
	"context"
	"errors"
	"sync"

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
		return failedFrom(ev, i)
	}
	return events.DynamoDBEventResponse{}
}

// All returns a handler that runs every one of handlers on each batch,
// concurrently, for the functions that do several things with one stream
// (DynamoDB Streams serves at most two readers per shard without
// throttling). Each handler skips the records that are not its own, as the
// recovery handlers do. The batch item failures are the earliest record any
// handler failed and every record after it, as Process reports them; a
// failure naming no record of the batch (an empty or unknown identifier),
// which Lambda takes as the whole batch failing, fails every record. The
// handlers must be idempotent, as the failed records are delivered to all of
// them again. An error of one handler is the error of the batch.
func All(handlers ...Handler) Handler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		resps := make([]events.DynamoDBEventResponse, len(handlers))
		errs := make([]error, len(handlers))
		var wg sync.WaitGroup
		for i, h := range handlers {
			wg.Go(func() { resps[i], errs[i] = h(ctx, ev) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return events.DynamoDBEventResponse{}, err
		}
		index := make(map[string]int, len(ev.Records))
		for i, rec := range ev.Records {
			index[rec.Change.SequenceNumber] = i
		}
		first := len(ev.Records)
		for _, r := range resps {
			for _, f := range r.BatchItemFailures {
				i, ok := index[f.ItemIdentifier]
				if !ok || f.ItemIdentifier == "" {
					// Lambda fails the whole batch for an identifier that
					// names no record of it (empty, unknown).
					i = 0
				}
				first = min(first, i)
			}
		}
		return failedFrom(ev, first), nil
	}
}

// failedFrom reports the records of ev from index i on as batch item
// failures; none when i is past the last record.
func failedFrom(ev events.DynamoDBEvent, i int) events.DynamoDBEventResponse {
	if i >= len(ev.Records) {
		return events.DynamoDBEventResponse{}
	}
	failures := make([]events.DynamoDBBatchItemFailure, 0, len(ev.Records)-i)
	for _, r := range ev.Records[i:] {
		failures = append(failures, events.DynamoDBBatchItemFailure{ItemIdentifier: r.Change.SequenceNumber})
	}
	return events.DynamoDBEventResponse{BatchItemFailures: failures}
}
