// Package idempotency makes state-changing HTTP endpoints safe to retry.
//
// A client sends an Idempotency-Key header (an RFC 8941 sf-string, as the IETF
// draft-ietf-httpapi-idempotency-key-header says, or a bare Stripe-style token).
// The key is scoped to the caller's tenant and hashed; the request is reduced to a
// fingerprint: SHA-256 over method, route and the RFC 8785 canonical form of the
// JSON body. The pair (scoped key, fingerprint) decides every outcome:
//
//   - no live record for the key: the request executes and its response is stored;
//   - a COMPLETED record with the same fingerprint: the stored response is replayed
//     byte for byte with Idempotent-Replayed: true;
//   - a record with another fingerprint: ErrKeyReused (422);
//   - an IN_PROGRESS record whose lease is held, or an UNKNOWN record: an
//     *InProgressError carrying Retry-After (409).
//
// Records move through a small state machine, every step a conditional write:
//
//	(absent) --Commit--------------------------------> COMPLETED --TTL--> (absent)
//	(absent) --Reserve--> IN_PROGRESS --Complete------> COMPLETED
//	                      IN_PROGRESS --Release-------> (absent)          (5xx, nothing done)
//	                      IN_PROGRESS --MarkUnknown---> UNKNOWN           (ambiguous outcome,
//	                                                                        or lease lost while calling out)
//	                      UNKNOWN     --Complete------> COMPLETED          (reconciled)
//	                      UNKNOWN     --Release-------> (absent)           (provably nothing happened)
//	                      UNKNOWN     --MarkUnknown---> UNKNOWN            (a retry after UnknownRedrive:
//	                                                                        a new lease token re-announces
//	                                                                        the record to the reconciler)
//
// Three modes cover the ways an endpoint can have effects. In Atomic mode the
// effects are DynamoDB writes (Effect values) committed in the same transaction
// as the COMPLETED record: one round trip per request in every outcome, and no
// IN_PROGRESS state at all. In Leased mode the record is reserved IN_PROGRESS
// with a lease token and a lease deadline, the handler runs, and completion is
// conditioned on the lease token (a fencing token), so a late zombie cannot
// overwrite a newer owner; its effects, if any, are committed with the
// completion, so an abandoned reservation is safe to release. External mode is
// Leased mode for handlers that call out to another system: an abandoned
// reservation there may have had an effect, so it is never re-executed blindly
// but moved to UNKNOWN and reconciled with the other system.
//
// While IN_PROGRESS a record's expiry (the TTL attribute) is its lease deadline,
// so DynamoDB's TTL deletes abandoned reservations; a record whose expiry has
// passed counts as absent at once, whether or not it has been deleted yet,
// except an External reservation, which must go through UNKNOWN first.
//
// A response with status 5xx is never stored, and neither is any response the
// handler writes before it calls Begin (validation errors), so a corrected
// request with the same key executes.
//
// The package knows nothing of AWS or of any business domain: storage is the
// Store interface, and HTTP problem rendering is left to the caller through
// Config.OnError.
package idempotency
