package recovery

import "github.com/oncehq/once/idempotency/internal/nilness"

// Counter counts events for metrics; a CloudWatch EMF emitter is one. A nil
// Counter, or one holding a nil pointer, counts nothing.
type Counter interface {
	// Count adds one to each named counter.
	Count(names ...string)
}

// Metric names counted by the Sweeper, the Reconciler, the Scheduler and
// the Checker. Alarm on MetricFailed, MetricUnroutable, MetricEffectsDropped
// and MetricUnrestored, not on MetricDeferred nor MetricCheckFailed: a failed
// check is retried, and one that keeps failing ends in a dead-letter queue
// to alarm on instead (the Scheduler's stream's on-failure destination, the
// Checker's queue's redrive target; template.yaml's SweeperDLQAlarm and
// CheckDLQAlarm), without the alarm a passing fault would raise.
const (
	MetricZombieSwept        = "zombie_swept"
	MetricReconcileScheduled = "reconcile_scheduled"
	MetricResolved           = "reconcile_resolved"
	MetricFailed             = "reconcile_failed"
	MetricUnroutable         = "reconcile_unroutable"
	// MetricEffectsDropped counts the UNKNOWN records a Reconciler ended
	// without the effects their resolution gave, because those effects
	// alone are more than one write of the store carries: the record is
	// completed with the 500 response_too_large problem, and the effects
	// are never written (for a release's, the holds they would have given
	// back stay held). Counted once per record, by the delivery whose write
	// ended it, and not as MetricFailed: the record is final, nothing is
	// retried. An operator must act on it (alarm on it): write what the
	// effects would have, or give the holds back.
	MetricEffectsDropped = "reconcile_effects_dropped"
	// MetricUnrestored counts the abandoned External reservations, and the
	// UNKNOWN items written before UNKNOWN records lost their TTL attribute
	// (the DynamoDB store writes none now), that TTL deleted and a Sweeper
	// could not restore
	// because a new reservation (a retry of the same request, or another
	// request: not the record's own earlier restore, nor a reservation made
	// after the reconciler released that restore, which its mark tells)
	// took their key after the deletion: the request may have run twice, and what the first
	// attempt did at the other system is left unreconciled, an operator's
	// to settle.
	MetricUnrestored = "zombie_unrestored"
	// MetricDeferred counts the records a Reconciler failed, to be
	// retried, because nothing had happened yet but Settle had not passed
	// and the invocation had no time left to wait for it: expected, not
	// alarmed (a record deferred until its retries run out reaches the
	// on-failure destination, which is).
	MetricDeferred = "reconcile_deferred"
	// MetricCheckScheduled counts the checks a Scheduler sent, one per
	// reservation and per record moved to UNKNOWN (under a new lease token).
	MetricCheckScheduled = "check_scheduled"
	// MetricCheckRescheduled counts the checks a Checker sent on because
	// the lease had not run out yet (or the UNKNOWN record's expiry had not
	// come).
	MetricCheckRescheduled = "check_rescheduled"
	// MetricAbandoned counts the abandoned reservations a Checker
	// recovered: moved to UNKNOWN (External) or released.
	MetricAbandoned = "reservation_abandoned"
	// MetricUnknownRedriven counts the UNKNOWN records a Checker handed to
	// the reconciler again because they were still UNKNOWN, under the lease
	// token they were checked with, at their expiry: unresolved for a whole
	// retention, with no client retry nor operator's reannounce meanwhile
	// (each is counted reconcile_scheduled too). Expected for a record the
	// reconciler cannot settle yet (a provider outage); one redriven again
	// and again is one the reconciler keeps failing or deferring, alarmed
	// there. That includes the records it can never route or resolve
	// (reconcile_unroutable: no Resolver, or idempotency.ErrUnresolvable):
	// each comes back every retention, counted here and there again, its
	// alarm firing again, under a new lease token each time (an operator's
	// oncectl forget, fenced on the token, may need to read it again).
	MetricUnknownRedriven = "unknown_redriven"
	// MetricCheckFailed counts the checks that could not be sent or acted
	// on (each is retried).
	MetricCheckFailed = "check_failed"
)

type noCounter struct{}

func (noCounter) Count(...string) {}

func counterOr(c Counter) Counter {
	if nilness.Nil(c) {
		return noCounter{}
	}
	return c
}
