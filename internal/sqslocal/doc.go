// Package sqslocal is a local Amazon SQS endpoint for the devstack and the
// tests: it speaks the AWS JSON 1.0 protocol (POST / with X-Amz-Target:
// AmazonSQS.<Operation>), which the AWS SDK for Go v2's sqs client uses, so
// the production code runs unchanged against it. It is emulation only and
// never linked into a function.
//
// It holds standard queues in memory with SQS's semantics where the code
// relies on them: per-message DelaySeconds (0 to 900 seconds) over the
// queue's; a visibility timeout per receive (the queue's, or the receive's
// own); ReceiveMessage with up to ten messages, long polling (WaitTimeSeconds
// up to 20) and the ApproximateReceiveCount, SentTimestamp,
// ApproximateFirstReceiveTimestamp and SenderId attributes; a redrive policy
// (RedrivePolicy: deadLetterTargetArn and maxReceiveCount) that moves a
// message received maxReceiveCount times to the dead-letter queue when it is
// about to be received once more, keeping its ID and body; DeleteMessage
// that deletes only with the latest receipt handle (an earlier one succeeds
// and deletes nothing, as SQS documents); the message retention period; and
// the errors the SDK maps to its types (QueueDoesNotExist,
// ReceiptHandleIsInvalid, MessageNotInflight, ...), with the
// awsQueryCompatible x-amzn-query-error header.
//
// Operations: CreateQueue, DeleteQueue, GetQueueUrl, ListQueues,
// GetQueueAttributes (with the ApproximateNumberOfMessages counts),
// SetQueueAttributes, PurgeQueue, ListDeadLetterSourceQueues, SendMessage,
// SendMessageBatch, ReceiveMessage, DeleteMessage, DeleteMessageBatch,
// ChangeMessageVisibility and ChangeMessageVisibilityBatch. Not emulated:
// FIFO queues, message attributes, the message move tasks, permissions and
// tags. Requests are not authenticated: any SigV4 signature is accepted.
package sqslocal
