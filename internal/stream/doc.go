// Package stream runs a local event source mapping for the devstack: Poller
// reads a table's stream through the DynamoDB Streams API and invokes a
// handler (the public idempotency/stream.Handler) as Lambda would. It is
// emulation, never linked into a function.
//
// # Local event source mapping
//
// Poller reads every shard of a table's latest stream through the DynamoDB
// Streams API, parents before children, and invokes a handler in process with
// the events Lambda would send, honouring the response as an event source
// mapping configured with FunctionResponseTypes [ReportBatchItemFailures],
// BisectBatchOnFunctionError, MaximumRetryAttempts and an on-failure
// destination:
//
//   - Each shard has one batch in flight (ParallelizationFactor 1); shards are
//     read concurrently, so the handler must be safe for concurrent use. A
//     shard is read about four times a second while records flow (up to
//     MaxBatchSize records a read, handed over in batches of BatchSize),
//     less often while it is idle: while its reads find no record that the
//     Filter passes.
//   - A response without batch item failures checkpoints the whole batch.
//   - Batch item failures checkpoint the records before the lowest failed
//     sequence number and retry from it. A failure with an empty identifier,
//     or one naming no record of the batch, fails the whole batch.
//   - A handler error (or a panic) fails the whole batch. With BisectOnError
//     a failed batch of more than one record is split in two halves that are
//     retried in order; splitting does not count as a retry.
//   - A batch that keeps failing is retried MaxRetryAttempts times, with a
//     bounded exponential backoff; then its records go to the dead letter and
//     the shard moves past them. When the last failure was a batch item
//     failure and BisectOnError is set, only the failed record goes to the
//     dead letter and the records after it are delivered afresh: this
//     isolates a poison record the way bisection does for handler errors.
//     (Lambda, as documented, retries and then discards the whole remaining
//     batch; with BisectOnError unset, the poller does the same.)
//
// Checkpoints are kept in memory: a restarted Poller starts again from
// StartAt. An expired shard iterator is re-obtained after the last checkpoint.
// The dead letter receives the records themselves (Lambda's on-failure
// destination gets only their coordinates), images included, so a dead-letter
// file may hold response bodies: keep it local and out of version control.
// ReadDeadLetters reads one back.
package stream
