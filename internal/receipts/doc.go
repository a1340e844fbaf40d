// Package receipts is the receipts function: triggered by the outbox
// table's stream (the INSERT of each order's receipt job, see
// outbox.Job), it sends the receipt through the mail API and records
// the send on the job and on the order (receipt sent, receipt_sent_at).
//
// Streams deliver at least once and the mail API is not idempotent (every
// POST sends a message), so the sender deduplicates by the job's ID, on the
// job item itself:
//
//   - before sending, a conditional write claims the job (queued or failed ->
//     sending, with a claim token and a deadline, ClaimFor ahead): a
//     redelivered record whose job is sent, or claimed by a live sender,
//     sends nothing;
//   - after sending, one transaction records the send on the job (sent,
//     fenced on the claim token) and on the order;
//   - an attempt that provably sent nothing (the mail API unreachable, 503,
//     429, or a refusal) releases the claim (failed) and is tried again:
//     up to Tries times in the invocation, with a doubling backoff, then by
//     the stream mapping's retries, which end, after a bounded number, in
//     the on-failure queue, whose alarm fires.
//
// One window is left: a sender that dies (or whose answer is lost: a mail
// timeout) between the mail API accepting the message and the record of
// the send leaves the job claimed; once the claim has run out, a
// redelivery sends the receipt again. The cost is a second copy of the same
// receipt, never a lost one (the alternative, never sending a job whose
// claim ran out, would lose receipts silently).
//
// The records of a batch are sent concurrently, each on its own: one
// receipt that keeps failing does not hold the others of its batch back
// (they are sent and, when Lambda redelivers them from the failed record
// on, skipped as sent). Records of later batches on the same shard do wait
// for the failing one's retries: stream order is per shard.
package receipts
