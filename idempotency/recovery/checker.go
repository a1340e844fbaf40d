package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/internal/nilness"
)

// CheckStore is the part of idempotency.Store the Checker uses.
type CheckStore interface {
	// Get returns the record for key (a strongly consistent read), or an
	// error wrapping idempotency.ErrNotFound.
	Get(ctx context.Context, key idempotency.Key) (idempotency.Record, error)
	// MarkUnknown moves the record held under lease to UNKNOWN under
	// newLease, returning an *idempotency.ConflictError when the lease is
	// no longer held.
	MarkUnknown(ctx context.Context, key idempotency.Key, lease, newLease string, expiresAt, now time.Time) error
	// Release deletes the record held under lease, returning an
	// *idempotency.ConflictError when the lease is no longer held.
	Release(ctx context.Context, key idempotency.Key, lease string, effects []idempotency.Effect) error
}

// CheckerConfig configures a Checker. Store and Queue are required.
type CheckerConfig struct {
	// Store is the idempotency store.
	Store CheckStore
	// Queue receives the checks that arrive before their record's lease
	// has run out, or before an UNKNOWN record's expiry, sent on for the
	// rest.
	Queue Queue
	// Retention is the expiry a record moved to UNKNOWN is given
	// (idempotency.DefaultRetention), as the Sweeper gives one; expired, it
	// is still UNKNOWN, never free for a new request, and the store's TTL
	// never deletes it (the DynamoDB store writes it without the TTL
	// attribute): it stays until it is reconciled or an operator forgets
	// it, and its check, due at its expiry, hands it to the reconciler
	// again then (and so once per Retention, for as long as the chain of
	// checks lasts: a check that ends in the check dead-letter queue, or the
	// Scheduler's stream record in the sweeper's, ends it, both alarmed,
	// until an operator runs oncectl dlq redrive check or oncectl
	// reannounce). Keep it longer than the
	// reconciler can take to resolve it (its stream mapping's retries, the
	// provider's settle time), and than the middleware's Lease.
	Retention time.Duration
	// Margin is added to the deadline (a lease's end, or an UNKNOWN
	// record's expiry) of a check sent on (DefaultMargin).
	Margin time.Duration
	// Logger receives one line per abandoned reservation, per UNKNOWN
	// record redriven and per failure
	// (default: discard).
	Logger *slog.Logger
	// Metrics counts reservation_abandoned, unknown_redriven,
	// reconcile_scheduled, check_rescheduled and check_failed.
	Metrics Counter
	// Now returns the current time (time.Now).
	Now func() time.Time
}

// Checker handles the checks a Scheduler sent, as an SQS-triggered Lambda
// handler: it recovers the reservations that are still held under the
// checked lease once it has run out, and hands the records still UNKNOWN
// under the checked lease token at their expiry to the reconciler again (see
// the package documentation). It is safe for concurrent use.
type Checker struct {
	cfg CheckerConfig
}

// NewChecker returns a Checker for cfg, filling in defaults. A Store or
// Queue that is nil, or an interface holding a nil pointer (a
// *sqsqueue.Queue whose sqsqueue.New failed), is an error here rather than a
// panic at the first check, as is a Store whose Validate method reports it
// misconfigured (dynamo.Store.Validate).
func NewChecker(cfg CheckerConfig) (*Checker, error) {
	var errs []error
	if err := storeError("CheckerConfig", cfg.Store); err != nil {
		errs = append(errs, err)
	}
	if nilness.Nil(cfg.Queue) {
		errs = append(errs, errors.New("recovery: CheckerConfig.Queue is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Retention <= 0 {
		cfg.Retention = idempotency.DefaultRetention
	}
	if cfg.Margin <= 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Metrics = counterOr(cfg.Metrics)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Checker{cfg: cfg}, nil
}

// Handle is the SQS handler: it checks each message of ev and reports the
// ones that failed as batch item failures (the event source mapping sets
// FunctionResponseTypes: ReportBatchItemFailures), which the queue delivers
// again after its visibility timeout and moves to its dead-letter queue
// after its maxReceiveCount. Messages are independent: one failure does not
// hold up the others. It never returns an error itself.
func (c *Checker) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	for _, m := range ev.Records {
		if ctx.Err() != nil || c.message(ctx, m) != nil {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	}
	return resp, nil
}

// message handles one message, counting and logging a failure.
func (c *Checker) message(ctx context.Context, m events.SQSMessage) error {
	log := c.cfg.Logger.With("message_id", m.MessageId)
	check, err := DecodeCheck(m.Body)
	if err != nil {
		c.cfg.Metrics.Count(MetricCheckFailed)
		log.Error("undecodable check: left to the queue's dead-letter queue", "err", err.Error())
		return err
	}
	key, _ := check.Key() // DecodeCheck parsed it
	log = log.With("tenant", key.Tenant, "key", key.Short(), "route", check.Route)
	if err := c.Check(ctx, log, check); err != nil {
		c.cfg.Metrics.Count(MetricCheckFailed)
		log.Error("check failed; the message will be delivered again", "err", err.Error())
		return err
	}
	return nil
}

// Check acts on one check, as Handle does for a message, logging to log
// (the Checker's logger when nil). It returns an error when the check
// should be tried again.
func (c *Checker) Check(ctx context.Context, log *slog.Logger, check Check) error {
	if log == nil {
		log = c.cfg.Logger
	}
	key, err := check.Key()
	if err != nil {
		return fmt.Errorf("recovery: check: %w", err)
	}
	rec, err := c.cfg.Store.Get(ctx, key)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		log.Debug("checked reservation is gone: nothing to recover")
		return nil
	case err != nil:
		return fmt.Errorf("recovery: check %s: %w", key.Short(), err)
	case !checked(rec.Status) || rec.LeaseToken != check.LeaseToken:
		log.Debug("checked record has moved on: nothing to recover", "status", string(rec.Status))
		return nil
	}
	now := c.cfg.Now()
	if !rec.Expired(now) {
		// Early (a long lease or retention, chained through MaxDelay, or
		// clocks that disagree): send it on for the rest.
		check.Deadline = rec.ExpiresAt
		delay := delayUntil(rec.ExpiresAt, c.cfg.Margin, now)
		if err := c.cfg.Queue.Send(ctx, check.Encode(), delay); err != nil {
			return fmt.Errorf("recovery: send check of %s on: %w", key.Short(), err)
		}
		c.cfg.Metrics.Count(MetricCheckRescheduled)
		log.Debug("check arrived before the lease ran out: sent on", "lease_deadline", rec.ExpiresAt, "delay", delay.String())
		return nil
	}
	log = log.With("lease_deadline", rec.ExpiresAt, "external", rec.External)
	if rec.Status == idempotency.StatusUnknown {
		// Unresolved for a whole retention under the same lease token: the
		// reconciler gave up on it or never got it, and no client retried.
		// Hand it to the reconciler again, as a retry's redrive and oncectl
		// reannounce do: the new lease token is the stream MODIFY that
		// triggers it, and arms the next check.
		err = c.cfg.Store.MarkUnknown(ctx, key, rec.LeaseToken, idempotency.NewToken(), now.Add(c.cfg.Retention), now)
		if leaseLost(log, err, "unresolved record already moved on; nothing to do") {
			return nil
		}
		if err != nil {
			return fmt.Errorf("recovery: redrive %s: %w", key.Short(), err)
		}
		c.cfg.Metrics.Count(MetricUnknownRedriven, MetricReconcileScheduled)
		log.Info("record still UNKNOWN at its expiry handed to the reconciler again")
		return nil
	}
	if rec.External {
		// Its call out may have had an effect: hand it to the reconciler.
		// The move to UNKNOWN under a new lease token is the stream MODIFY
		// that triggers it.
		err = c.cfg.Store.MarkUnknown(ctx, key, rec.LeaseToken, idempotency.NewToken(), now.Add(c.cfg.Retention), now)
		if moved(log, err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("recovery: mark %s UNKNOWN: %w", key.Short(), err)
		}
		c.cfg.Metrics.Count(MetricAbandoned, MetricReconcileScheduled)
		log.Info("abandoned external reservation moved to UNKNOWN for reconciliation")
		return nil
	}
	// Leased (and Atomic) requests have their effects with the completion:
	// an abandoned reservation had none, and the key is simply freed.
	err = c.cfg.Store.Release(ctx, key, rec.LeaseToken, nil)
	if moved(log, err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recovery: release %s: %w", key.Short(), err)
	}
	c.cfg.Metrics.Count(MetricAbandoned)
	log.Info("abandoned reservation released")
	return nil
}

// moved reports (and logs) whether err says the lease is no longer held:
// the request completed, a retry or another check got there first.
func moved(log *slog.Logger, err error) bool {
	return leaseLost(log, err, "abandoned reservation already moved on; nothing to do")
}

// leaseLost reports whether err is the store's ConflictError (the lease is no
// longer held), and if so logs msg with the status the record has now.
func leaseLost(log *slog.Logger, err error, msg string) bool {
	var conflict *idempotency.ConflictError
	if !errors.As(err, &conflict) {
		return false
	}
	existing := "none"
	if conflict.Existing != nil {
		existing = string(conflict.Existing.Status)
	}
	log.Info(msg, "existing", existing)
	return true
}
