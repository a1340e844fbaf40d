// Package receipts is the receipts function and the resender function.
// The receipts function is triggered by the outbox table's stream (the
// INSERT of each order's receipt job, see outbox.Job): it sends the receipt
// through the mail API and records the send on the job and on the order
// (receipt sent, receipt_sent_at). The resender is triggered by the receipt
// retry queue: it tries again the receipts whose mail failed.
//
// # Once per job, on both paths
//
// Streams and queues deliver at least once and the mail API is not
// idempotent (every POST sends a message), so every attempt, from the
// stream or from the retry queue, deduplicates by the job's ID, on the job
// item itself:
//
//   - before sending, a conditional write claims the job (queued or failed ->
//     sending, with a claim token and a deadline, ClaimFor ahead): a job that
//     is sent, or claimed by a live attempt, is not sent;
//   - after sending, one transaction records the send on the job (sent,
//     fenced on the claim token) and on the order;
//   - an attempt that provably sent nothing (the mail API unreachable, 503
//     or 429) releases the claim (failed, with the error).
//
// # A mail outage does not hold the stream up
//
// The stream makes one attempt per job. One that does not send (a mail
// outage; an answer lost; a send that could not be recorded; the job held
// by another attempt's claim) does not fail its record, which would hold up
// every later record of its shard for the stream's retries: the job goes to
// the retry queue (Config.Retries, SQS) with a delay, and the record
// succeeds. HandleRetries, the resender's handler, makes the next attempt,
// and on failure sends the next retry: the delay doubles from RetryBase
// (1s) with each attempt, half of it random (equal jitter), up to SQS's 15
// minutes, and, unless the retry carries a send to record (below), is never
// shorter than what is left of a claim that holds the job. After
// MaxAttempts attempts (ONCE_RECEIPT_ATTEMPTS, 30: the last 2.5 to 5 hours
// after the first) the resender gives up: it sends the retry to the
// dead-letter queue (Config.DeadLetters), whose alarm fires; the job stays
// in the outbox as its last attempt left it (failed, with its attempts and
// last error; or sending, under the claim of a send not recorded), the
// order's receipt queued. A dead letter sent back to the retry queue
// (oncectl dlq redrive receipt-retry) starts its attempts over.
//
// What retrying with backoff does not cure fails instead: the mail API
// refusing the message (another 4xx: a misconfiguration), a job that does
// not decode, the outbox table or the retry queue failing. A stream record
// then fails and is retried by the stream mapping, then sent to its
// on-failure queue (alarmed); a retry message fails and is delivered again
// after the queue's visibility timeout, then moved to the dead-letter queue
// by its redrive policy.
//
// # A send that could not be recorded is recorded, not sent again
//
// When the mail API accepted the message and its record fails (the outbox
// or orders table failing), the attempt knows what it sent: its retry
// carries the claim and the message's ID, after the backoff alone (not the
// rest of the claim), and the next attempt records that send, fenced on
// the claim whether or not it has run out (and on the job's order), and
// sends nothing. So a record failing for all MaxAttempts attempts (the
// tables failing, or the order gone) sends one receipt; the dead letter
// carries the send too, and its redrive records it. The record finds the
// claim gone only when another attempt claimed the job after it ran out: a
// duplicate delivery of the job (a stream redelivery, or a retry chain it
// started), which sends a copy of its own.
//
// # The one window left
//
// An attempt that dies, or whose answer is lost (a mail timeout), between
// the mail API accepting the message and the record of the send leaves
// the job claimed, and nothing says what was sent. So does a failed record
// whose retry, carrying the send, cannot be queued either (DynamoDB and SQS
// failing together): the redelivery knows nothing of it. The attempt after the
// claim has run out sends the receipt again. The cost is a second copy of
// the same receipt, never a lost one (the alternative, never sending a job
// whose claim ran out, would lose receipts silently).
//
// Two deliveries of the same stream record, or of the same retry, may each
// start a chain of retries; every chain is bounded by MaxAttempts, and the
// claim keeps them from sending twice (a chain that finds the job sent
// ends).
//
// # Observability
//
// Each stream record writes one JSON log line "receipts: record", each
// retry one "receipts: retry", with outcome sent, duplicate, retrying (warn,
// with retry_in and err), dead_lettered (error), ignored or error. EMF
// metrics: receipt_sent, receipt_duplicate, receipt_failed (a send that
// failed), receipt_retried (a retry sent), receipt_dead_lettered.
package receipts
