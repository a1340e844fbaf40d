// Package sqsmapping runs a local SQS event source mapping for the devstack:
// a Poller long-polls a queue through the SQS API (the local endpoint of
// internal/sqslocal, or LocalStack's) and invokes a handler in process with
// the events.SQSEvent Lambda would send. It is emulation, never linked into
// a function.
//
// It honours the response as an event source mapping with BatchSize,
// ScalingConfig's MaximumConcurrency (Concurrency) and FunctionResponseTypes
// [ReportBatchItemFailures] does:
//
//   - A successful invocation deletes the batch's messages, except, with
//     ReportBatchItemFailures, those named by its batch item failures.
//   - A handler error or a panic, or a batch item failure naming no message
//     of the batch, fails the whole batch: nothing is deleted.
//   - A message not deleted becomes visible again when its visibility
//     timeout runs out and is delivered again; the queue's redrive policy
//     moves it to the dead-letter queue once it has been received
//     maxReceiveCount times. The Poller itself never changes a message's
//     visibility, as Lambda does not.
//
// Each invocation is bounded by Timeout (the function's), and the event goes
// through JSON on its way to the handler, as it does in Lambda.
package sqsmapping
