// Package recovery holds the stream-triggered handlers that make sure no
// idempotency key stays stuck and no request runs twice after a crash: the
// Sweeper, which deals with abandoned reservations that DynamoDB's TTL
// deleted, and the Reconciler, which finds out what became of requests whose
// outcome is unknown, dispatching on each record's route to that route's
// idempotency.Resolver.
//
// Both are Lambda handlers for the idempotency table's stream (see the
// Handle methods), take the store and an optional Counter for metrics, and
// are idempotent, as streams deliver at least once.
//
// # Sweeper
//
// The sweeper function is triggered by the idempotency table's stream,
// filtered to REMOVE records whose old image is IN_PROGRESS. While a record is
// IN_PROGRESS its TTL attribute is its lease deadline, so a request that died
// holding its lease leaves a reservation that DynamoDB deletes by itself. What
// the sweeper does with it depends on the old image:
//
//   - Not External (Atomic and Leased endpoints commit their effects with the
//     completion, and hold nothing with the reservation): nothing happened
//     that needs remembering. The key is free already; the sweeper counts
//     zombie_swept and logs it.
//   - External (the request called another system and its outcome is
//     unknown): the sweeper restores the key as UNKNOWN, with a fresh lease
//     token and the retention as expiry, so that the reconciler finds out what
//     happened and no retry executes the request again meanwhile. It writes
//     with Store.Reserve, whose condition (no record, or a reclaimable one)
//     never overwrites a key that a newer request owns; such a conflict, like
//     the one a redelivered stream record meets, is success. It counts
//     zombie_swept, and reconcile_scheduled when the record was restored.
//
// The api also deletes IN_PROGRESS records itself: it releases the key when a
// request ends with a 5xx (Store.Release). Those REMOVEs must be ignored. A
// REMOVE is taken for a TTL deletion when its userIdentity is {type: Service,
// principalId: dynamodb.amazonaws.com}, as AWS and DynamoDB Local mark TTL
// deletions, or, since LocalStack's TTL deletions carry no userIdentity, when
// its ApproximateCreationDateTime, truncated to the second, is at or after
// the old image's lease deadline rounded up to the second (RemovedByTTL). A
// release happens within the lease, so a timestamp rounded down stays before
// the deadline; DynamoDB Local rounds the timestamp down to the minute, so
// without a user identity a TTL deletion in the deadline's minute reads as a
// release, which is safe: the key is simply free, and a retry executes anew
// with the same forward key, which the other system, idempotent by key,
// answers with what it did the first time.
//
// # Reconciler
//
// The reconciler function is triggered by the idempotency table's stream,
// filtered to INSERT and MODIFY records whose new image is UNKNOWN. For each
// it asks the Resolver registered for the record's route what happened
// (looking the request up at the other system under its forward key) and
// finalises the record under the lease token the image carries:
//
//   - The request took effect (Resolution.Response set): the record is
//     completed with that response and the resolution's effects, kept for the
//     retention, so that the client's retry replays it. Counts
//     reconcile_resolved.
//   - Nothing happened (no Response): that is proof only once no request with
//     the key can still be on its way to the other system, that is once the
//     record's UpdatedAt (when it became UNKNOWN; no new request calls out for
//     an UNKNOWN key) plus Config.CallTimeout has passed. A record resolved
//     earlier is resolved again once that time has come, waiting for it if
//     the invocation's deadline allows and failing the record (to be retried)
//     otherwise. Then the record is released with the resolution's effects
//     (undoing what the reservation held), so that a retry executes anew.
//     Counts reconcile_resolved.
//   - The lease is no longer held (a *idempotency.ConflictError): someone else
//     finalised the record, or will. That is success; it is logged.
//   - The record's route has no Resolver: the record is never released and
//     never re-executed. It stays UNKNOWN for an operator, the reconciler
//     counts reconcile_unroutable (alarm on it) and moves on. So does a
//     Resolver's error wrapping idempotency.ErrUnresolvable.
//
// Anything else fails the record: the other system could not be asked, the
// store could not be written, the image does not decode. A failed record is a
// batch item failure, which the event source mapping retries a bounded number
// of times before it sends the record to the on-failure destination; every
// failure counts reconcile_failed.
package recovery
