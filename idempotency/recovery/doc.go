// Package recovery holds the handlers that make sure no idempotency key
// stays stuck and no request runs twice after a crash: the Scheduler and the
// Checker, which recover an abandoned reservation as soon as its lease runs
// out; the Sweeper, which deals with abandoned reservations that DynamoDB's
// TTL deleted (an External one only if written before External reservations
// lost their TTL attribute: a legacy item); and the Reconciler, which finds out what
// became of requests whose outcome is unknown, dispatching on each record's
// route to that route's idempotency.Resolver.
//
// The Scheduler, the Sweeper and the Reconciler are Lambda handlers for the
// idempotency table's stream, the Checker for an SQS queue (see the Handle
// methods). They take the store (the Scheduler a Queue instead, the Checker
// both), an optional Counter for metrics and an optional *slog.Logger (one
// line per record recovered and per failure; without one they log nothing,
// and never write through slog's default logger or package log: give them a
// JSON one, as the README's recovery function does), and are idempotent, as
// streams and queues deliver at least once.
//
// # Scheduler and Checker
//
// AWS deletes expired items "within a few days", so recovery cannot wait for
// TTL. Instead, every reservation arms a check, and so does every move to
// UNKNOWN. The Scheduler handles the INSERT and MODIFY records whose new
// image is IN_PROGRESS (a reservation, or a reclaim of an expired record) or
// UNKNOWN (a move to it, a redrive, a Sweeper's restore); filter them with
// {"eventName": ["INSERT", "MODIFY"], "dynamodb": {"NewImage": {"status":
// {"S": ["IN_PROGRESS", "UNKNOWN"]}}}}. It sends a Check (the record's ID,
// route, lease token and deadline: the record's ExpiresAt, for an UNKNOWN
// record its expiry) to a Queue, delayed until that deadline plus a margin;
// a queue delays a message by at most MaxDelay (SQS's 15 minutes), and a
// check sent earlier than its deadline is sent on. A MODIFY that keeps the
// status, the lease token and the deadline (a Resolver's Advance) sends
// nothing: its check stands. A record whose check cannot be sent fails, with
// every later record of its batch.
//
// The Checker handles the delivered checks, each independently (a failed one
// is a batch item failure, delivered again by the queue and moved to its
// dead-letter queue after its maxReceiveCount). It reads the record,
// consistently, and acts only if it is still IN_PROGRESS or UNKNOWN under the
// checked lease token:
//
//   - The lease has not run out, or the UNKNOWN record's expiry has not come
//     (the check came early): the check is sent on, due at the stored
//     deadline. Counts check_rescheduled.
//   - An UNKNOWN record at or past its expiry: unresolved for a whole
//     retention, and nobody (a client's retry, an operator's reannounce)
//     handed it to the reconciler since. It is redriven as they would:
//     Store.MarkUnknown, fenced on the checked token, gives it a new lease
//     token and the retention from now as expiry, the stream MODIFY that
//     hands it to the Reconciler again and arms its next check. Counts
//     unknown_redriven and reconcile_scheduled. So a record the reconciler
//     gave up on is tried again once per retention, as the store's TTL
//     deletion and the Sweeper's restore used to do before UNKNOWN records
//     lost their TTL. That chain has no backstop: a check that ends in the
//     check queue's dead-letter queue (CheckDLQ), or a Scheduler's stream
//     record that ends in its on-failure destination (SweeperDLQ), both
//     alarmed, leaves the record UNKNOWN with no check armed, never tried
//     again until an operator sends the check back (oncectl dlq redrive
//     check) or re-arms it (oncectl reannounce; oncectl unknown marks the
//     check of a record long past its expiry lost).
//   - It has, and the record is External: the request may have had an
//     effect, so the record moves to UNKNOWN under a new lease token with
//     the retention as expiry (Store.MarkUnknown, fenced on the checked
//     token): the stream MODIFY that hands it to the Reconciler. Counts
//     reservation_abandoned and reconcile_scheduled. The DynamoDB store
//     gives an External reservation no TTL attribute (nor an UNKNOWN
//     record), so this check, or a client's retry past the lease (its
//     redrive, the same fenced MarkUnknown), is what ends it; one whose
//     check is lost (CheckDLQ, SweeperDLQ) and that nobody retries stays
//     IN_PROGRESS, holding its key, until an operator re-arms it (oncectl
//     dlq redrive check, or oncectl reannounce; oncectl unknown lists it,
//     its check lost, once past its lease by more than MaxDelay and a
//     margin).
//   - It has, and it is not External: nothing happened that needs
//     remembering, and the key is released (Store.Release, fenced). Counts
//     reservation_abandoned.
//   - The record is gone, completed, or held under another lease token, or
//     the fenced write finds it so: someone else moved it on (the request,
//     a retry's redrive, the Reconciler). Nothing to do.
//
// A multi-step flow's reservation is an External record, recovered the same
// way: its route's Resolver resumes it. The check carries the route, for logs
// and for any route that should ever need its own recovery.
//
// One stream shard serves at most two readers without throttling: a
// deployment whose idempotency table already feeds a Sweeper and a
// Reconciler runs the Scheduler in the Sweeper's function
// (stream.All(scheduler.Handle, sweeper.Handle)), with both filters.
//
// # Sweeper
//
// The Sweeper handles an abandoned reservation that DynamoDB's TTL deleted
// (no longer a backstop for an External one written since: see below). It
// is triggered by the idempotency table's stream, filtered to REMOVE
// records whose old image is IN_PROGRESS. While a reservation that
// is not External is IN_PROGRESS its TTL attribute is its lease deadline
// (a day past it once Advance moved it: dynamo.ReservationTTLMargin), so a
// request that died holding its lease leaves a reservation that DynamoDB
// deletes by itself. The DynamoDB store gives an External reservation no
// TTL attribute (and removes it at every write that leaves one so): TTL
// deleting it freed its key, for a second call out by a retry, until the
// Sweeper restored it, which the stream's lag (seconds to an hour) left
// open; its check, a retry's redrive or an operator hands it to the
// Reconciler instead (above). Only an External reservation written before
// that, and never written since, still carries one (its lease deadline
// plus a day, dynamo.ExternalReservationTTL) and can be deleted so: the
// restore stays for those (`oncectl reannounce -lost` after the upgrade
// hands every one whose lease has run out to the Reconciler first). What
// the sweeper does with a deleted reservation depends on the old image:
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
//     lets it take the key exactly when a new request could: a record within
//     its retention and an External reservation, whatever its lease, are
//     never overwritten, however late a retried stream record comes. Such a
//     conflict is success. When the record it meets is the request
//     continuing (an earlier restore of it, the same fingerprint and
//     creation time, UNKNOWN or since completed: a redelivered stream
//     record), or finds the mark its earlier restore wrote (below), it
//     counts nothing more; any other is a new reservation that
//     took the key between the deletion and the restore (a retry of the
//     same request or another request, created since, IN_PROGRESS or
//     completed), which may have called the other system again while the
//     first outcome is unknown: it counts zombie_unrestored (alarmed) and
//     logs an Error naming the record. A newer record past its retention counts as absent, as it does for a
//     new request (a COMPLETED record or a reservation that is not
//     External; never an UNKNOWN record), and a Leased reservation taken so
//     is fenced by its lease token. It counts zombie_swept, and reconcile_scheduled when the record
//     was restored.
//
// Every restore is written with a mark naming the stream REMOVE it restores
// from (RestoreMarker.RestoreMark: its event ID, in the same write as the
// record, kept 48 hours, past the 24 hours a stream keeps a record), so
// that a redelivery of that REMOVE tells its own restore from a new
// reservation even once the record has moved on in a way continuing cannot
// see: released by the reconciler (the request had no effect), after which
// the key is free (the mark's condition fails the write: nothing is
// restored a second time) or reserved anew by a retry (the conflict finds
// the mark, RestoreMarker.Marked: no zombie_unrestored, as the first attempt's
// outcome was reconciled). A REMOVE counted zombie_unrestored is marked too
// (RestoreMarker.Mark, after the count), so that it is counted once however
// often it is delivered. A store that is not a RestoreMarker is swept
// without marks.
//
// The Sweeper also restores an UNKNOWN record that TTL deleted before it
// was resolved, filtered to REMOVE records whose old image is UNKNOWN and
// whose userIdentity is the TTL process's. The DynamoDB store writes no TTL
// attribute on an UNKNOWN record (and removes it at every write that leaves
// a record UNKNOWN), so only an item written UNKNOWN before that, and never
// written since, can still be deleted so: the restore stays for those. Its
// outcome is still unknown: deleted, what its reservation held (a refund's
// hold on a payment) would stay held for good, and a retry would run the
// request again whatever the first attempt did. It is restored as UNKNOWN,
// with a fresh lease token and the retention as expiry, by the same
// Store.Reserve and with the same conflicts as an abandoned reservation, so
// that the reconciler looks it up again; it counts reconcile_scheduled (or
// zombie_unrestored, when a new request reserved the key in the seconds
// between the deletion and the restore). The restore, like a legacy
// External reservation's, carries no TTL attribute: a record that can never
// be resolved stays UNKNOWN, alarmed by the reconciler, until an operator
// deletes it (a delete conditioned on its status and lease token, as
// oncectl forget does in the once application): such a REMOVE carries no
// TTL identity, so the Sweeper leaves it deleted. The TTL identity is
// required here, with no timestamp rule: the reconciler's release of a
// resolved record is a REMOVE of an UNKNOWN record too, and LocalStack's TTL
// deletions, which carry no identity, are not restored.
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
// answers with what it did the first time. A REMOVE of an IN_PROGRESS item
// without the TTL identity whose old image does not decode as a record (no
// lease deadline to go by) is ignored, logged at WARN, unless its raw TTL
// attribute (expires_at) had passed when it was removed (an emulator's TTL
// deletion carries no identity): a delete by hand of an item nothing can
// read (once's runbook deletes one with aws dynamodb delete-item), not a
// reason to hold the shard through the mapping's retries and send it to
// the dead-letter queue. With the TTL identity, or past its TTL attribute,
// it is an error, as before. (An UNKNOWN item's REMOVE without the TTL
// identity is ignored silently, whatever its image: the reconciler's
// release.)
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
//     retention, so that the client's retry replays it. A response too
//     large for the store (idempotency.ErrResponseTooLarge) is recorded as
//     the 500 response_too_large problem instead, as the live request does,
//     so that the record is final rather than failed at every redrive.
//     Counts reconcile_resolved.
//   - Nothing happened (no Response): that is proof only once no request with
//     the key can still be on its way to the other system, that is once the
//     record's UnknownSince (when it first became UNKNOWN; no new request
//     calls out for an UNKNOWN key, and a redrive, which calls nothing out,
//     keeps it; a Resolver's Advance to a later phase, which may call out,
//     moves it; its UpdatedAt for a record written before stores kept it)
//     plus ReconcilerConfig.Settle has passed. A record resolved
//     earlier is resolved again once that time has come, waiting for it
//     within the invocation. When the invocation's deadline does not leave
//     ReconcilerConfig.ResolveTime after that time, the record waits until
//     the deadline less ResolveTime (at once when less is left) and fails,
//     to be retried and wait on in the next delivery: an expected deferral,
//     counted as reconcile_deferred and logged at WARN, not as a failure
//     (see ReconcilerConfig.Settle for how long a Settle the stream's
//     retries cover). Then the record is released with the
//     resolution's effects (undoing what the reservation held), so that a
//     retry executes anew. Counts reconcile_resolved. Effects over the
//     store's limits on one write can never be written: the record is
//     completed with the response_too_large problem instead, the holds kept
//     (a retry must not take them again), as the live request's release
//     does. So is a completion whose effects alone are over them: the
//     problem recorded without them. Either way the record is final and
//     counts reconcile_effects_dropped (alarm on it: an operator must write
//     what the effects would have, or give the holds back), once, by the
//     write that ends it (a redelivery finds the lease gone); not
//     reconcile_failed, which counts what is retried, as the middleware
//     counts such a request effects_dropped rather than store_error.
//   - The lease is no longer held (a *idempotency.ConflictError, from the
//     completion or the release, or from the Resolver itself when it resumes
//     a multi-step request's phases with idempotency.ResumeSteps from a stale
//     image): someone else finalised the record, or will. That is success;
//     it is logged.
//   - The record's route has no Resolver: the record is never released and
//     never re-executed. It stays UNKNOWN for an operator, the reconciler
//     counts reconcile_unroutable (alarm on it) and moves on. So does a
//     Resolver's error wrapping idempotency.ErrUnresolvable. Such a record
//     comes back every retention, as any record left UNKNOWN: the Checker
//     redrives it at its expiry, so reconcile_unroutable is counted, and
//     its alarm fires, again once per retention until an operator forgets
//     it. Each redrive gives it a new lease token, so an operator's oncectl
//     forget, fenced on the token it read, may find it changed and need it
//     read again.
//
// Anything else fails the record: the other system could not be asked, the
// store could not be written, the image does not decode. A failed record is a
// batch item failure, which the event source mapping retries a bounded number
// of times before it sends the record to the on-failure destination; every
// such failure counts reconcile_failed (alarm on it) and is logged at ERROR.
// A deferral (above) fails the record the same way, to be retried, but
// counts reconcile_deferred.
package recovery
