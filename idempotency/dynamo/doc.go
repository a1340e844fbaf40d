// Package dynamo is the DynamoDB implementation of idempotency.Store.
//
// One item per scoped key, laid out as docs/design.md describes the
// IdempotencyTable (ItemFromRecord, RecordFromItem, RecordFromStreamImage and
// StreamImageStatus are the one mapping every package uses). Every Store write
// is one request: Commit is one TransactWriteItems; Reserve, Complete, Release
// and Advance are one conditional PutItem, PutItem, DeleteItem and UpdateItem
// without effects (and, for Complete, without an answer in chunk items), else
// one TransactWriteItems; MarkUnknown a conditional UpdateItem; Get a
// consistent GetItem. A failed condition returns *idempotency.ConflictError
// carrying the item DynamoDB returns with
// ReturnValuesOnConditionCheckFailure=ALL_OLD, so a conflict costs no second
// read of the record; reading an answer kept in chunk items (see
// CompressAbove), by Get or with a conflict, costs one BatchGetItem more.
//
// Times are stored to the millisecond (expires_at_ms, created_at,
// updated_at, unknown_since_ms): a record read back carries its times truncated to the
// millisecond, and the reclaim condition compares expires_at_ms with the
// caller's now truncated the same way, which is exactly Record.Reclaimable
// applied to the stored record. ReclaimCheck is that condition as a
// ConditionCheck, for a transaction of the caller's own fenced on a key being
// free. expires_at, the TTL attribute, is the expiry
// rounded up to the second (ReservationTTLMargin later for a reservation
// that is not External, once Advance has moved it), so TTL never deletes a
// record before it expires; an UNKNOWN record and an External reservation
// have none, so TTL never deletes them (ItemFromRecord).
//
// Errors: throttling, network failures, 5xx and context cancellation, once the
// SDK's own bounded retries are spent, wrap idempotency.ErrUnavailable. The
// only retry the store adds is for a write cancelled because a concurrent
// transaction held the item (TransactionConflict), which wrote nothing: a few
// attempts with full-jitter backoff. A failed condition is never retried.
//
// The SDK retries a request whose response it did not get, and a conditional
// write that had in fact landed then fails its condition against itself.
// Transactions carry a ClientRequestToken, which makes DynamoDB answer such a
// retry with success; for the single-item writes the store recognises its own
// write instead: when the item DynamoDB returns is exactly the record (or the
// UNKNOWN state) the call was writing, lease token included, the call
// succeeds.
//
// # Effects
//
// The effects the Store commits with a record (idempotency.Effect). Each is
// one item of the record's TransactWriteItems, written exactly when the
// record's own transition is: Put, Update and Delete write an item of any
// table, Check only conditions the transaction on one. Their fields are those
// of the TransactWriteItems request:
//
//   - Condition is a DynamoDB condition expression ("" for none), with
//     Names (#name -> attribute) and Values (:value -> any Go value,
//     marshalled with attributevalue.Marshal, or a types.AttributeValue).
//   - Key is the item's primary key, attribute by attribute, marshalled the
//     same way.
//   - Reject, when set, is called when the condition fails, with the item as
//     it stands (nil when there is none; DynamoDB returns it with
//     ReturnValuesOnConditionCheckFailure ALL_OLD): its error is the
//     request's business answer (a problem: the payment is not refundable, a
//     404 for an item that does not exist) and the middleware stores it when
//     it is a 4xx. Without Reject a failed condition is a 500.
//
// A transaction holds at most 100 items, the record included, and may write
// an item only once. The store checks a write against DynamoDB's limits
// before it sends it (limits.go: ErrTooLarge), but for what an Update makes
// of the item it changes, which only DynamoDB knows: an Update that would
// grow its item past 400 KB fails the write with ErrItemTooLarge, DynamoDB's
// refusal ("Item size to update has exceeded the maximum allowed size"), and
// the middleware answers it as it does a write over the limits (500
// response_too_large; the key released, or an External record completed
// with that problem), never as 500 internal_error.
package dynamo
