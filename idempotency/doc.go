// Package idempotency makes state-changing HTTP endpoints safe to retry,
// exactly once, on any store that implements Store (DynamoDB:
// idempotency/dynamo).
//
// A client sends an Idempotency-Key header (an RFC 8941 sf-string, as the IETF
// draft-ietf-httpapi-idempotency-key-header says, or a bare Stripe-style token).
// The key is scoped to the caller's tenant (Config.Tenant, from the
// authorizer, never from the request) and hashed; the request is reduced to a
// fingerprint: SHA-256 over method, route and the RFC 8785 canonical form of
// the JSON body. The pair (scoped key, fingerprint) decides every outcome:
//
//   - no live record for the key: the request executes and its response is
//     stored;
//   - a COMPLETED record with the same fingerprint: the stored response is
//     replayed byte for byte with Idempotent-Replayed: true;
//   - a record with another fingerprint: ErrKeyReused (422);
//   - an IN_PROGRESS record whose lease is held, or an UNKNOWN record: an
//     *InProgressError carrying Retry-After (409).
//
// A handler wrapped by the Middleware validates its request first (what it
// answers before Begin is neither stored nor counted as execution: a
// corrected request with the same key runs; a success without Begin is a
// forgotten Begin, answered 500), then calls Begin, and from
// there on its answer is the key's answer. A 5xx is never stored, with one
// exception: an External request whose answer is too large for the store,
// or for the transport to deliver (Config.Deliverable), answered
// ErrResponseTooLarge, has called out, so its record is completed with the
// 500 response_too_large problem in place of the answer rather than left
// open (a Leased request's reservation is released instead, and a retry
// executes again). When its effects, or the release effects giving its
// holds back, are by themselves too large, that problem is stored without
// them (the holds kept), and the Observation's outcome is
// OutcomeEffectsDropped: the one outcome an operator must act on.
//
// Store errors other than a failed condition answer 503 store_unavailable
// with Retry-After only when the store wraps ErrUnavailable (unreachable,
// throttled: a retry may succeed); any other (a missing table, denied
// access, a write the store refuses as invalid) is 500 internal_error, its
// text never sent to the client: it is in the Observation, and, when the
// request carries none (WithObservation), logged to Config.Logger, as
// OutcomeEffectsDropped is.
//
// # Modes
//
// Atomic (Middleware.Atomic): the effects are DynamoDB writes (Effect
// values, added with Call.AddEffect) committed in the same transaction as
// the COMPLETED record: one round trip per request in every outcome, and no
// IN_PROGRESS state at all.
//
// Leased (Middleware.Leased): Begin reserves the key IN_PROGRESS with a lease
// token and a lease deadline, the handler runs, and the completion, with its
// effects, is conditioned on the lease token (a fencing token), so a late
// zombie cannot overwrite a newer owner. An abandoned reservation is released.
// The completion (and a release, UNKNOWN, a multi-step pause, or what a
// refused or conflicting write then calls for) is written once the handler
// has returned even if the request's context has ended (a client that hung
// up), bounded by Config.CompletionTimeout instead; the lease (Config.Lease)
// must outlast the longest the handler can run.
//
// External (Middleware.External): Leased for a handler that calls another
// system, sending Call.ForwardKey as that system's idempotency key. An
// abandoned reservation or an ambiguous outcome (Call.Unknown) may have had
// an effect there, so it is never re-executed blindly: the record goes
// UNKNOWN and the reconciler (idempotency/recovery) asks the route's
// Resolver what happened, completing the record with the answer the request
// would have had, or releasing the key when nothing happened. An External
// route cannot be wired without its Resolver, and no route can be wired
// under a name that is not a "METHOD /path" ServeMux pattern or is wrapped
// already (see Middleware.Wrap): both panic at start-up.
//
// # Effects
//
// Effects are business writes of any kind (puts, updates, deletes, and
// condition checks on other items; the DynamoDB store's are dynamo.Put,
// Update, Delete and Check) committed atomically with a record transition:
// with the commit (Atomic), with the completion (AddEffect), with the
// reservation itself (Begin's holds: what an External request takes before
// it calls out, so that concurrent requests see it taken), or with a release
// (AddReleaseEffect and Resolution.Effects: undoing the holds). An effect
// whose condition fails fails its transaction with a *RejectedError whose
// Err is the business answer; once execution has begun that answer is final
// for the key: a 4xx is stored and replayed like any other answer (Stripe's
// rule: validation is not stored, execution results are). Only that path
// costs a second write.
//
// # Multi-step requests
//
// A request that does several things (create an order, charge a card, queue
// a receipt) runs as phases with recovery points (BeginAt, Call.Steps,
// Steps.Advance). Each phase makes at most one call out, then commits its
// effects with the record's new point and data, fenced on the lease. A
// request abandoned between phases stays at its last point; whoever comes
// first resumes it there: a retry of the same request takes the lease over
// (after the lease, or at once when the last attempt answered a 5xx without
// declaring its outcome unknown, Call.Unknown), or the reconciler hands the
// record to the route's Resolver, which resumes it with ResumeSteps. A
// committed phase is never repeated.
//
// # States
//
// Records move through a small state machine, every step a conditional write:
//
//	(absent) --Commit--------------------------------> COMPLETED --TTL--> (absent)
//	(absent) --Reserve(point?)--> IN_PROGRESS --Complete------> COMPLETED
//	                      IN_PROGRESS --Advance(point)-> IN_PROGRESS        (a phase committed,
//	                                                                         or the lease taken over)
//	                      IN_PROGRESS --Release-------> (absent)          (5xx, nothing done)
//	                      IN_PROGRESS --MarkUnknown---> UNKNOWN           (ambiguous outcome,
//	                                                                        or lease lost while calling out)
//	                      UNKNOWN     --Advance(point)-> UNKNOWN           (a Resolver resuming phases)
//	                      UNKNOWN     --Complete------> COMPLETED          (reconciled)
//	                      UNKNOWN     --Release-------> (absent)           (provably nothing happened)
//	                      UNKNOWN     --MarkUnknown---> UNKNOWN            (a retry after UnknownRedrive:
//	                                                                        a new lease token re-announces
//	                                                                        the record to the reconciler)
//	                      UNKNOWN     (never deleted by TTL, nor is an External IN_PROGRESS)
//
// While IN_PROGRESS a record's expiry is its lease deadline, and the store's
// TTL deletes abandoned reservations that are not External after it; a
// record whose expiry has passed counts as absent at once, whether or not
// it has been deleted yet, except an External reservation, which must go
// through UNKNOWN (or, at a recovery point, be resumed) first, and which
// the store's TTL never deletes either (the DynamoDB store writes it
// without the TTL attribute): the recovery package's check at its lease
// deadline, or a retry after it (the redrive), hands it to the reconciler
// (MarkUnknown), and oncectl reannounce -lost does when that check was
// lost. An UNKNOWN record never counts as absent either: its request may
// have had its effect at the other system, so only its reconciliation
// (Complete or Release), or an operator's fenced delete, ends it. An
// UNKNOWN record's expiry (Retention after it went UNKNOWN or was last
// redriven) ends nothing: the reclaim condition never lets an UNKNOWN
// record through, whatever its expiry, and the store's TTL never deletes it
// (the DynamoDB store writes it without the TTL attribute), so its key is
// never free while its outcome is unknown.
// Only the redrive reads it (it extends the expiry, never shortens it) and
// an operator's tools (oncectl unknown lists it, oncectl reannounce extends
// it). A retry of it gets 409 (InProgressError) however old it is, and
// one UnknownRedrive or more after it last changed re-announces it to the
// reconciler (MarkUnknown), moving its expiry to at least Retention from
// then. A redrive keeps Record.UnknownSince, when the record first went
// UNKNOWN, from which a reconciler's wait for a call that may still land
// runs: retries, however frequent, do not put off its release. (A DynamoDB item written UNKNOWN, or as an External reservation,
// before its TTL attribute was dropped, if TTL deletes it, is restored as
// UNKNOWN by the recovery package's Sweeper from the stream; a retry that
// takes the key between the deletion and the restore is counted
// zombie_unrestored.)
//
// Record.Reclaimable is that rule, and a Store's Commit and Reserve
// conditions implement it.
//
// The package knows nothing of AWS or of any business domain: storage is the
// Store interface, and errors answer as their problems (package problem;
// Config.OnError can render them otherwise).
package idempotency
