package queue

import (
	"context"
	"sync"

	"github.com/aws/aws-lambda-go/events"
)

// Process handles the messages of an SQS batch concurrently, each with
// handle, and reports those whose handle failed (or that the context's end
// kept from being handled) as batch item failures: the queue delivers them
// again after its visibility timeout, and moves them to its dead-letter
// queue after its maxReceiveCount.
func Process(ctx context.Context, ev events.SQSEvent, handle func(context.Context, events.SQSMessage) error) events.SQSEventResponse {
	failed := make([]bool, len(ev.Records))
	var wg sync.WaitGroup
	for i, m := range ev.Records {
		wg.Go(func() { failed[i] = ctx.Err() != nil || handle(ctx, m) != nil })
	}
	wg.Wait()
	var resp events.SQSEventResponse
	for i, m := range ev.Records {
		if failed[i] {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	}
	return resp
}
