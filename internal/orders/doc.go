// Package orders is the domain of POST /v1/orders, a request that does
// three things with one Idempotency-Key and does each exactly once across
// crashes: it creates an order, charges the payment provider, and queues a
// receipt. It is built on the public idempotency engine only, as any user
// of the engine would build it, as a multi-step request (idempotency.BeginAt)
// whose recovery points are
//
//	order_created   the order item (status created) is written with the
//	                reservation, in one transaction (BeginAt's holds);
//	charge_created  the order is read (Flow.Reader); unless it holds the
//	                provider's answer already, the provider is charged under
//	                a key forwarded from the request (Steps.ForwardKey), and
//	                its answer is recorded with the order paid, or failed on
//	                a decline (Steps.Advance);
//	finished        one transaction stores the answer (201, or 402
//	                card_declined), marks the order complete and, for a paid
//	                order, writes its receipt job to the outbox table
//	                (Call.Finish, Call.AddEffect).
//
// A request that dies between two points is resumed from the last one by a
// retry of the same request (after the lease) or, with no retry, by the
// reconciler through the route's Resolver (idempotency.ResumeSteps), which
// runs the same phase code (Flow.Run): a committed phase is never repeated,
// and a phase run again repeats only its call out, under the same forward
// key, which the provider answers with the charge it already made. That
// holds while the provider remembers the key (Flow.KeyRetention): a resume
// later than that less KeyRetentionMargin calls nothing and returns
// ErrKeyRetention, the outcome left unknown for an operator.
//
// It serves no HTTP: its endpoints are package ordershttp's, so that the
// reconciler, which resumes orders, links neither the HTTP layer nor crash
// injection (the handler checks fault.AfterProviderCall in the callback it
// gives Flow.Run; a resumed request has no crash to inject).
//
// The order's ID is derived from the scoped key and the request's
// fingerprint, and every write of the flow is an idempotent upsert: a
// request that starts over at its first point (a retry that finds the
// record deleted by TTL before the sweeper restored it, or the same request
// after the key's retention) lands on the same order. The phase
// charge_created reads it before it calls: an order that holds a charge
// (paid, or declined) is not charged again, and the request answers what
// the first one did (the same charge, the same creation time, the same
// receipt job, which is not queued again once its receipt was sent); one
// the provider rejected answers its 422 again; one that holds none is
// charged only while the stored order, the first request's, is younger than
// the provider's key retention (ErrKeyRetention otherwise). The read counts
// against the request's deadline: once it is done, a request left less
// than the call's Flow.Timeout calls nothing (ErrNoTimeForCall, a 503 whose
// retry resumes at once), rather than a call its invocation could cut off.
//
// The receipt job (outbox.Job) is consumed by the receipts function
// (internal/receipts) from the outbox table's stream, which deduplicates by
// the job's ID.
package orders
