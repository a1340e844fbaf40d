// Package reconciler finalises UNKNOWN idempotency records: External requests
// whose effect at the payment provider is unknown, because the call timed out
// (the api marked the record UNKNOWN) or because the request was abandoned
// holding its lease (the sweeper, or a later request, did).
//
// The reconciler function is triggered by the idempotency table's stream,
// filtered to INSERT and MODIFY records whose new image is UNKNOWN. For each
// it asks the provider for the charge made under the request's forward key
// (idempotency.Key.Forward, the key the api sent) and finalises the record
// under the lease token the image carries:
//
//   - The provider has a charge, succeeded or failed: the request took
//     effect. The record is completed (Store.Complete) with the response
//     rebuilt from the charge by Config.Rebuild, kept for the retention, so
//     that the client's retry replays it. Counts reconcile_resolved.
//   - The provider has no charge: that proves nothing happened only once no
//     request with the key can still be on its way to the provider, that is
//     once the record's UpdatedAt (when it became UNKNOWN; no new request
//     calls out for an UNKNOWN key) plus the provider timeout has passed. A
//     record looked up earlier is looked up again once that time has come,
//     waiting for it if the invocation's deadline allows and failing the
//     record (to be retried) otherwise. Then the record is released
//     (Store.Release), so that a retry executes anew. Counts
//     reconcile_resolved.
//   - The lease is no longer held (a *idempotency.ConflictError: the record
//     is gone, completed, or UNKNOWN under a newer lease): someone else
//     finalised it, or will. That is success; it is logged.
//
// Records that are not UNKNOWN (or REMOVEs) are ignored. Anything else fails
// the record: the provider could not be asked or answered something
// unexpected, the store could not be written, the image does not decode, the
// response cannot be rebuilt. A failed record is a batch item failure, which
// the event source mapping retries a bounded number of times before it sends
// the record to the on-failure destination; every failure counts
// reconcile_failed, the metric the stack's ReconcileFailedAlarm watches
// (namespace once, dimension Service=reconciler). Handling is idempotent, as
// streams deliver at least once: a redelivered record finds its lease gone.
package reconciler
