// Package sweeper handles abandoned reservations: IN_PROGRESS idempotency
// records that DynamoDB's TTL process deleted because their lease ran out.
//
// The sweeper function is triggered by the idempotency table's stream,
// filtered to REMOVE records whose old image is IN_PROGRESS. While a record is
// IN_PROGRESS its TTL attribute is its lease deadline, so a request that died
// holding its lease leaves a reservation that DynamoDB deletes by itself. What
// the sweeper does with it depends on the old image:
//
//   - Not External (Atomic and Leased endpoints commit their effects with the
//     completion): nothing happened that needs remembering. The key is free
//     already; the sweeper counts zombie_swept and logs it.
//   - External (the request called another system and its outcome is
//     unknown): the sweeper restores the key as UNKNOWN, with a fresh lease
//     token and the retention as expiry, so that the reconciler finds out what
//     happened and no retry executes the request again meanwhile. It writes
//     with Store.Reserve, whose condition (no record, or a reclaimable one)
//     never overwrites a key that a newer request owns; such a conflict, like
//     the one a redelivered stream record meets, is success. It counts
//     zombie_swept, and reconcile_scheduled when the record was restored.
//
// # TTL deletions and releases
//
// The api also deletes IN_PROGRESS records itself: it releases the key when a
// request ends with a 5xx (Store.Release). Those REMOVEs must be ignored. A
// REMOVE is taken for a TTL deletion when
//
//   - its userIdentity is {type: Service, principalId:
//     dynamodb.amazonaws.com}, as AWS and DynamoDB Local mark TTL deletions;
//     or, since LocalStack's TTL deletions carry no userIdentity,
//   - its ApproximateCreationDateTime, truncated to the second, is at or
//     after the old image's lease deadline rounded up to the second (the
//     expires_at attribute).
//
// A release happens within the lease, before expires_at_ms and so before
// expires_at: a timestamp rounded down, to any precision, stays before it, so
// an in-time release never meets the rule. TTL deletes a record only after
// its expires_at, so a TTL deletion meets the rule when the timestamp is
// precise to the second, as AWS gives it. DynamoDB Local (and AWS in the
// past) round it down to the minute: a TTL deletion without a user identity
// in the minute of the lease deadline is then taken for a release. AWS and
// DynamoDB Local mark every TTL deletion, so this concerns emulators such as
// LocalStack, whose TTL job runs long after the deadline; and it is safe: the
// abandoned External reservation is not restored, the key is free, and a
// retry executes anew with the same forward key, which the provider,
// idempotent by key, answers with the charge it made.
//
// A release by a request that overran its lease meets the rule and is treated
// as abandoned: for an External record that means one needless
// reconciliation, which releases the key once the provider timeout has
// passed. A record without ApproximateCreationDateTime is judged by the time
// it is handled instead, which errs the same way.
//
// Records the sweeper cannot decode fail (a batch item failure), so that the
// event source mapping retries them a bounded number of times and then sends
// them to the on-failure destination. Handling is idempotent, as streams
// deliver at least once.
package sweeper
