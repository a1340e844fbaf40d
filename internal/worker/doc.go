// Package worker is the outbox worker: it charges new pending payments
// through the payment provider and settles them, driven by the payments
// table's stream (a Lambda event source mapping in AWS, a stream.Poller in
// the devstack).
//
// # What a record does
//
// A payment is written pending by the API, in the same transaction as the
// idempotency record of its 201 (see paymentshttp.Effect); its INSERT stream
// record is the outbox entry. For each such record Worker.Handle:
//
//  1. decodes the new image into a payments.Payment and checks that it is
//     one (pk = "<tenant>#<id>", a valid payment ID);
//  2. charges it with Charger.Charge under ChargeKey(tenant, id), a key
//     derived from the payment alone, so every delivery of the record, and
//     every retry of it, sends the same key and the same parameters, and the
//     provider charges at most once;
//  3. settles it with Settler.Settle: succeeded with the charge's ID;
//     failed with the decline code (card_declined) and the ID of the failed
//     charge the provider recorded; or failed with the code
//     provider_rejected and no charge when the provider refused the request
//     itself (provider.ErrRejected: a 400, 413 or 422, nothing charged, and
//     the same payment would be refused again). Settle only moves a pending
//     payment; a payment found already settled (a redelivery, or a
//     concurrent delivery that won) is a success, not an error.
//
// Records that are not an INSERT with a new image whose status is the string
// "pending" (MODIFY and REMOVE records, settled payments, items of another
// shape) are ignored, exactly as the template's FilterCriteria
// {"eventName": ["INSERT"], "dynamodb": {"NewImage": {"status": {"S":
// ["pending"]}}}} drops them before they reach the function.
//
// # Transient failures: the retry queue
//
// When the provider answers ErrNotCharged (503, 429, no connection) or
// ErrOutcomeUnknown (a timeout after the request was sent, a 5xx), or the
// settle cannot be written, the payment is not retried in the stream's
// place, where it would hold up every record behind it on its shard, of any
// tenant: it goes to the retry queue (Config.Retries, an SQS queue) with a
// delay, and its record succeeds. The message says how many attempts were
// made and, when one of them may have charged (its answer was lost, or the
// charge was made and the settle failed), when.
//
// HandleRetries, the retrier function's handler, takes those messages. It
// reads the payment (consistently) and does nothing if it is settled. Else
// it makes one more attempt under the same key, and settles the payment or,
// on another transient failure, sends the next retry: the delay doubles from
// RetryBase (1s) with each attempt, half of it random (equal jitter), up to
// MaxRetryDelay (SQS's 15 minutes). The payment's retry window
// (RetryWindow after its creation; ONCE_WORKER_RETRY_WINDOW, 6h) ends the
// attempts: a retry the backoff would bring past its end is due when the
// charge can be looked up instead. At the end of the window no attempt is
// made, and the payment is never settled on what its retry chain saw: the
// chain knows its own attempts only, and a stream invocation that crashed
// after the provider charged, followed by 503s until the window's end,
// would be settled failed over a real charge. Its charge is always looked
// up at the provider (one GET per payment given up on), once CallTimeout
// (ONCE_PROVIDER_SETTLE) has passed since the later of the window's end and
// the latest attempt that may have charged (until then a request made just
// before the end, by a duplicate of the message or a redelivered record,
// may still be on its way), and the payment is settled as the provider's
// record of the charge says: succeeded with it, failed with its failure
// code, or failed with failure_code provider_unavailable when there is
// none. A look-up that fails (the provider down, an answer that is not its
// record) settles nothing, and neither does a settle on a look-up's answer
// that cannot be written (the payments table unavailable): the retrier
// sends the message back itself, the failures counted in it, delayed by the
// same backoff (from RetryBase, up to MaxRetryDelay), and the message
// succeeds, so that an outage at the window's end does not use up the
// queue's receives; the next one looks the charge up again and settles on
// that answer (the settle is conditional on the payment being pending, so
// one written after all makes the next a no-op). That ends at the look-up
// horizon (Config.LookUpHorizon, ONCE_WORKER_LOOKUP_HORIZON,
// DefaultLookUpHorizon: 24h after the first look-up was due): a look-up or
// settle that fails then fails the message. A read of the payment that
// fails (payments.ErrUnavailable: the table down, at any point of the
// chain) is sent back the same way, the run of failed reads carried in the
// message (when its first was made, and how many), until LookUpHorizon
// after its first; a read that succeeds ends the run. A message that
// cannot be processed (undecodable, the payments table failing to read it
// past that horizon or refusing the read, the look-up or its settle
// failing past the horizon) is a batch item failure:
// the queue delivers it again and, after its maxReceiveCount, moves it to
// its dead-letter queue (alarmed), the payment still pending. Messages are
// handled concurrently.
//
// The stream charges nothing after the window either: a record met once it
// has ended (a window shorter than the mapping's MaximumRecordAgeInSeconds,
// a record redelivered after a crashed invocation) goes to the retry queue
// at once, as an attempt that may have charged, whatever the retrier has
// done since: a payment it settled stays as it is, a pending one is settled
// as the provider's record of its charge says.
//
// # Failures
//
// A record fails, and is reported with every later record of its batch as a
// batch item failure (stream.Process), when its image does not decode into a
// payment (a poison record), when the provider answers another 4xx (a
// *provider.StatusError that is not provider.ErrRejected, such as 401 for a
// wrong API key: a misconfiguration, never settled on a guess), and when a
// transient failure cannot be sent to the retry queue (or there is none:
// Config.Retries unset). Lambda retries from the failed record, bisecting
// the batch; the retry sends the same key, so the provider either charges
// for the first time or replays the charge it made.
// After MaximumRetryAttempts the record goes to the on-failure destination
// and the shard moves on: a poison record never blocks the records after it
// for longer than its retries. Handle itself never returns an error.
//
// # Observability
//
// Each record handled writes one JSON log line, "worker: record", with its
// event_id, sequence_number and outcome, plus tenant and payment once the
// payment is decoded: outcome succeeded or failed (this delivery settled the
// payment; a failed one settled provider_rejected is logged at warn level
// with err, the provider's status and code, one settled
// provider_unavailable at warn level), already_settled, ignored (at debug
// level), retrying (at warn level, with err and retry_in), or error (with
// err, at warn level for the provider's transient outcomes and DynamoDB
// outages, error otherwise). Each retry message writes one "worker: retry"
// line with its message_id and attempt and the same outcomes. The provider
// idempotency key is never logged.
//
// Two EMF metrics count settlements made by this worker, one per payment
// however many times its record is delivered: worker_charged when it settles
// a payment succeeded, worker_failed when it settles one failed (declined,
// rejected or provider_unavailable); worker_retried counts the retries sent.
// worker_read_failed counts the retrier's reads of a payment that failed
// with payments.ErrUnavailable (the payments table down), one per read:
// such a message is sent back, not failed, so it is the one sign of a read
// outage before the look-up horizon (alarmed when it persists). The
// retrier's other send-back path, at the end of a payment's retry window,
// counts the same way: worker_lookup_failed per look-up of the charge that
// failed (the provider down or erroring), worker_settle_failed per settle
// on a look-up's answer that could not be written (the payments table
// down), each alarmed when it persists. worker_settle_failed also counts,
// once per settle, a settle after a charge within the retry window that
// could not be written, the stream worker's (Service=worker) and the
// retrier's alike: the payment goes to the retry queue as a new message,
// counted in worker_retried too, so the same metric persisting is the sign
// of the outage there (alarmed for each function). A provider failure never
// reaches the settle, and never counts it, even one that may have charged.
// Records that fail are not counted otherwise; they show in the logs, the
// function's Errors and IteratorAge metrics and the on-failure destination.
package worker
