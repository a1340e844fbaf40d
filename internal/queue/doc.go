// Package queue is the functions' side of Amazon SQS: the SQS client for
// the configuration (SQS_ENDPOINT, AWS_REGION), Open, which resolves a queue
// name or URL once to the library's sqsqueue.Queue (messages sent with
// per-message delays: the recovery checks, the worker's and the receipts'
// retries), Backoff, the delays of retries, Process, the
// handling of an SQS batch with partial failures, and Start, the main of a
// function that uses queues. The local SQS endpoint and
// the event source mapping that the devstack runs in place of Lambda's live
// in internal/sqslocal and internal/sqsmapping, never linked into a
// function.
package queue
