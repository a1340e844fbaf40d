package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/tenant"
)

// Metric names (EMF, see the package documentation).
const (
	MetricCharged = "worker_charged"
	MetricFailed  = "worker_failed"
	// MetricRetried counts the charges sent to the retry queue after a
	// transient failure, one per attempt.
	MetricRetried = "worker_retried"
	// MetricReadFailed counts the retrier's reads of a retry's payment that
	// failed with payments.ErrUnavailable (the payments table down), one
	// per failed read: each such message is sent back as a new one, so
	// the retry queue's age alarm never sees an outage, and nothing is
	// dead-lettered until the look-up horizon; template.yaml alarms on
	// this metric persisting instead.
	MetricReadFailed = "worker_read_failed"
	// MetricLookUpFailed counts the retrier's look-ups of a payment's
	// charge, at the end of its retry window, that failed (the provider
	// down or erroring, an answer that is not its record of the charge, or
	// a charge still not final, pending hours after it was made), one per
	// failed look-up: like a failed read, each such
	// message is sent back as a new one until the look-up horizon, so this
	// metric persisting (alarmed in template.yaml) is the one sign of a
	// provider outage before then.
	MetricLookUpFailed = "worker_lookup_failed"
	// MetricSettleFailed counts the settles of a payment that could not
	// be written with payments.ErrUnavailable (the payments table down),
	// one per failed settle: the stream worker's and the retrier's, after
	// a charge within the payment's retry window, which send the payment
	// to the retry queue as a new message (counting worker_retried too),
	// and the retrier's on the answer of a look-up at the window's end,
	// which sends the message back to look the charge up and settle again
	// as a failed look-up is. Either way no queue's age grows and nothing
	// is dead-lettered before the look-up horizon, so this metric
	// persisting (alarmed in template.yaml, under Service=worker and
	// Service=retrier) is the one sign of a payments table that refuses
	// writes. A provider failure never counts it.
	MetricSettleFailed = "worker_settle_failed"
)

// Outcomes of a record, as logged in the "outcome" attribute.
const (
	outcomeSucceeded      = "succeeded"
	outcomeFailed         = "failed"
	outcomeAlreadySettled = "already_settled"
	outcomeIgnored        = "ignored"
	outcomeError          = "error"
	outcomeRetrying       = "retrying"
)

// Failure codes the worker records itself.
const (
	// declinedCode: the provider declined the charge without saying why.
	declinedCode = "declined"
	// rejectedCode: the provider refused the charge request itself
	// (provider.ErrRejected); it made no charge.
	rejectedCode = "provider_rejected"
	// unavailableCode: the provider could not be reached, or answered that
	// it charged nothing, for the whole retry window, and has no charge for
	// the payment when asked at the window's end; nothing was charged.
	unavailableCode = "provider_unavailable"
)

// Charger charges the provider; *provider.Client implements it.
type Charger interface {
	// Charge charges req under the idempotency key. It returns the
	// succeeded charge, a *provider.DeclinedError when the provider recorded
	// a failed charge, an error wrapping provider.ErrNotCharged or
	// provider.ErrOutcomeUnknown, an error matching provider.ErrRejected for
	// a request the provider refused as wrong, or another error (a
	// *provider.StatusError for another 4xx).
	Charge(ctx context.Context, key string, req provider.ChargeRequest) (provider.Charge, error)
	// Lookup returns the charge (succeeded or failed) made under the key,
	// an error wrapping provider.ErrNoCharge when there is none, or another
	// error when the provider could not tell.
	Lookup(ctx context.Context, key string) (provider.Charge, error)
}

// Settler reads and settles payments; *payments.Table implements it.
type Settler interface {
	// Get returns tenant's payment id, read consistently, or an error
	// wrapping payments.ErrNotFound or payments.ErrUnavailable.
	Get(ctx context.Context, tenant, id string) (payments.Payment, error)
	// Settle moves tenant's pending payment id to status (succeeded with
	// chargeID, or failed with failureCode). It returns a
	// *payments.NotPendingError when the payment is already settled, and
	// errors wrapping payments.ErrNotFound or payments.ErrUnavailable.
	Settle(ctx context.Context, tenant, id string, status payments.Status, chargeID, failureCode string) error
}

// Config holds a Worker's dependencies.
type Config struct {
	// Charger charges the provider. Required.
	Charger Charger
	// Settler settles the payments. Required.
	Settler Settler
	// Logger receives one line per record (default: discard).
	Logger *slog.Logger
	// Metrics receives worker_charged, worker_failed, worker_retried,
	// worker_read_failed, worker_lookup_failed and worker_settle_failed
	// (nil discards).
	Metrics *metrics.Emitter
	// Retries, when set, receives the payments whose charge failed
	// transiently (see the package documentation); without it such a
	// record fails, and the stream retries it in place.
	Retries Queue
	// RetryWindow is how long after its creation a payment is retried
	// (DefaultRetryWindow).
	RetryWindow time.Duration
	// RetryBase is the delay before the second attempt; it doubles with
	// each attempt, jittered, up to MaxRetryDelay (DefaultRetryBase).
	RetryBase time.Duration
	// CallTimeout bounds one provider call: a charge whose outcome was
	// unknown at t is looked up after t + CallTimeout (DefaultCallTimeout).
	CallTimeout time.Duration
	// LookUpHorizon bounds the look-ups of a payment's charge at the end of
	// its retry window: a look-up that fails (the provider down, an answer
	// that is not its record) before LookUpHorizon has passed since the
	// first look-up was due is made again later, the message sent back with
	// a backoff; one that fails after it fails the message, which ends in
	// the retry queue's dead-letter queue (DefaultLookUpHorizon). It
	// bounds a run of failed reads of the payment the same way, from the
	// run's first failed read (which the message carries).
	LookUpHorizon time.Duration
	// Budget is the time a payment needs at least in the stream's
	// invocation: its provider call and its settle. A pending payment met
	// with less time left before the context's deadline is not charged:
	// it goes to Retries as a payment nothing charged, so that a batch of
	// slow calls never runs the invocation past its timeout, which would
	// fail the whole batch (0: no check).
	Budget time.Duration
	// Now returns the current time (time.Now).
	Now func() time.Time
}

// Worker charges and settles the pending payments of a payments table
// stream, and retries those whose charge failed transiently from its retry
// queue. It is safe for concurrent use.
type Worker struct {
	charger Charger
	settler Settler
	log     *slog.Logger
	metrics *metrics.Emitter
	retries Queue
	window  time.Duration
	base    time.Duration
	call    time.Duration
	horizon time.Duration
	budget  time.Duration
	now     func() time.Time
}

// New returns a Worker for cfg, or an error naming every missing
// dependency.
func New(cfg Config) (*Worker, error) {
	var errs []error
	if cfg.Charger == nil {
		errs = append(errs, errors.New("worker: Config.Charger is required"))
	}
	if cfg.Settler == nil {
		errs = append(errs, errors.New("worker: Config.Settler is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Worker{
		charger: cfg.Charger, settler: cfg.Settler, log: log, metrics: cfg.Metrics, retries: cfg.Retries,
		window: cfg.RetryWindow, base: cfg.RetryBase, call: cfg.CallTimeout, horizon: cfg.LookUpHorizon, budget: cfg.Budget, now: cfg.Now,
	}
	if w.window <= 0 {
		w.window = DefaultRetryWindow
	}
	if w.base <= 0 {
		w.base = DefaultRetryBase
	}
	if w.call <= 0 {
		w.call = DefaultCallTimeout
	}
	if w.horizon <= 0 {
		w.horizon = DefaultLookUpHorizon
	}
	if w.now == nil {
		w.now = time.Now
	}
	return w, nil
}

// Handle processes a batch of payments table stream records in order (see
// the package documentation) and reports the first failed record and every
// later one as batch item failures. Its error is always nil: a failure
// concerns records, never the whole batch. It has the signature of
// stream.Handler and of a Lambda handler.
func (w *Worker) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return stream.Process(ctx, ev, w.record), nil
}

// record handles one record and logs its outcome.
func (w *Worker) record(ctx context.Context, rec events.DynamoDBEventRecord) error {
	c := stream.NewChange(rec)
	log := w.log.With("event_id", c.EventID, "sequence_number", c.SequenceNumber)
	if !pendingInsert(c) {
		log.Debug("worker: record", "outcome", outcomeIgnored, "event_name", string(c.EventName))
		return nil
	}
	p, err := decode(c)
	if err != nil {
		log.Error("worker: record", "outcome", outcomeError, "err", err)
		return err
	}
	log = log.With("tenant", p.Tenant, "payment", p.ID)
	if w.retries != nil && !w.now().Before(p.Created.Add(w.window)) {
		return w.late(ctx, log, p)
	}
	var res result
	if left, short := w.short(ctx); short {
		err = fmt.Errorf("worker: %s left in the invocation, under the %s a charge needs: %w", left.Round(time.Millisecond), w.budget, provider.ErrNotCharged)
	} else {
		res, err = w.process(ctx, p)
	}
	if err != nil && w.retries != nil && transient(err) {
		// Not in place: the shard moves on, and the payment is retried
		// from the retry queue after a backoff.
		msg := retryMessage{Tenant: p.Tenant, Payment: p.ID, Attempt: 1}
		if maybeCharged(err) {
			msg.Unknown = w.now()
		}
		delay, serr := w.schedule(ctx, p, msg)
		if serr == nil {
			log.Warn("worker: record", "outcome", outcomeRetrying, "attempt", 1, "retry_in", delay.String(), "err", err)
			return nil
		}
		err = errors.Join(err, serr)
	}
	if err != nil {
		log.Log(ctx, errorLevel(err), "worker: record", "outcome", outcomeError, "err", err)
		return err
	}
	logResult(ctx, log, "worker: record", res)
	return nil
}

// late hands p, met on the stream after its retry window ended, to the
// retrier without charging it: the window ends every charge attempt, and the
// retrier may have settled p failed at its end already (the stream brings a
// record up to the mapping's MaximumRecordAgeInSeconds after the write, and
// again after an invocation that crashed), so a charge now could take money
// for a failed payment. The retry says an attempt may have charged (an
// earlier delivery of the record may have, and the stream cannot tell): the
// retrier does nothing to a settled payment, and settles a pending one as
// the provider's record of its charge says.
func (w *Worker) late(ctx context.Context, log *slog.Logger, p payments.Payment) error {
	msg := retryMessage{Tenant: p.Tenant, Payment: p.ID, Attempt: 1, Unknown: w.now()}
	if err := w.send(ctx, msg, 0); err != nil {
		log.Error("worker: record", "outcome", outcomeError, "err", err)
		return err
	}
	log.Warn("worker: record", "outcome", outcomeRetrying, "attempt", 1, "retry_in", "0s", "retry_window_ended", true)
	return nil
}

// logResult logs the outcome of a payment processed to the end, as msg.
func logResult(ctx context.Context, log *slog.Logger, msg string, res result) {
	attrs := []any{"outcome", res.outcome, "status", string(res.status)}
	level := slog.LevelInfo
	if res.rejected != nil {
		// The API accepted what the provider refuses: worth a look.
		level = slog.LevelWarn
		attrs = append(attrs, "err", res.rejected)
	}
	if res.conflict {
		// Another settlement than this charge's: worth a look, but the
		// payment is settled and retrying would not change it.
		level = slog.LevelWarn
		attrs = append(attrs, "conflict", "the stored settlement differs from the provider's answer")
	}
	if res.gaveUp {
		// Nothing charged through the whole retry window: worth a look.
		level = slog.LevelWarn
		attrs = append(attrs, "failure_code", unavailableCode)
	}
	log.Log(ctx, level, msg, attrs...)
}

// result is what processing a pending payment came to.
type result struct {
	outcome string
	// status is the payment's status now.
	status payments.Status
	// conflict is set when the payment was already settled otherwise than
	// the provider's answer says.
	conflict bool
	// rejected is the provider's refusal of the charge request, when it
	// settled the payment failed.
	rejected error
	// gaveUp is set when the payment was settled failed at the end of its
	// retry window.
	gaveUp bool
}

// settlement is what the provider's answer settles a payment to.
type settlement struct {
	status                payments.Status
	chargeID, failureCode string
	// rejected is the provider's refusal of the request (failureCode
	// rejectedCode).
	rejected error
}

// process charges p and settles it. A settle that cannot be written
// (payments.ErrUnavailable: the payments table down) counts
// MetricSettleFailed, once per settle, whatever the caller then does with
// the error (the stream worker and the retrier send p to the retry queue
// as a new message); a charge that fails never reaches the settle, so a
// provider failure never counts it.
func (w *Worker) process(ctx context.Context, p payments.Payment) (result, error) {
	s, err := w.charge(ctx, p)
	if err != nil {
		return result{}, err
	}
	res, err := w.settle(ctx, p, s)
	if errors.Is(err, payments.ErrUnavailable) {
		w.metrics.Count(MetricSettleFailed)
	}
	return res, err
}

// settle settles p as s says.
func (w *Worker) settle(ctx context.Context, p payments.Payment, s settlement) (result, error) {
	err := w.settler.Settle(ctx, p.Tenant, p.ID, s.status, s.chargeID, s.failureCode)
	var settled *payments.NotPendingError
	switch {
	case errors.As(err, &settled):
		got := settled.Payment
		return result{
			outcome:  outcomeAlreadySettled,
			status:   got.Status,
			conflict: got.Status != s.status || got.ProviderChargeID != s.chargeID || got.FailureCode != s.failureCode,
		}, nil
	case err != nil:
		return result{}, fmt.Errorf("worker: settle payment %s: %w", p.ID, err)
	}
	if s.status == payments.StatusSucceeded {
		w.metrics.Count(MetricCharged)
		return result{outcome: outcomeSucceeded, status: s.status}, nil
	}
	w.metrics.Count(MetricFailed)
	return result{outcome: outcomeFailed, status: s.status, rejected: s.rejected, gaveUp: s.failureCode == unavailableCode}, nil
}

// charge charges p under its key and returns how to settle it.
func (w *Worker) charge(ctx context.Context, p payments.Payment) (settlement, error) {
	ch, err := w.charger.Charge(ctx, ChargeKey(p.Tenant, p.ID), ChargeRequest(p))
	var declined *provider.DeclinedError
	switch {
	case err == nil:
		if ch.ID == "" {
			return settlement{}, fmt.Errorf("worker: charge payment %s: the provider's charge has no ID", p.ID)
		}
		return settlement{status: payments.StatusSucceeded, chargeID: ch.ID}, nil
	case errors.As(err, &declined):
		code := declined.Code
		if code == "" {
			code = declinedCode
		}
		return settlement{status: payments.StatusFailed, chargeID: declined.Charge.ID, failureCode: code}, nil
	case errors.Is(err, provider.ErrRejected):
		// No charge was made, and the payment, which never changes, would
		// be refused again: settle it instead of failing the record forever.
		return settlement{status: payments.StatusFailed, failureCode: rejectedCode, rejected: err}, nil
	default:
		return settlement{}, fmt.Errorf("worker: charge payment %s: %w", p.ID, err)
	}
}

// pendingInsert reports whether c is the outbox entry of a payment: an
// INSERT whose new image has the string status "pending" (the template's
// filter).
func pendingInsert(c stream.Change) bool {
	if c.EventName != events.DynamoDBOperationTypeInsert {
		return false
	}
	s, ok := c.NewImage["status"]
	return ok && s.DataType() == events.DataTypeString && s.String() == string(payments.StatusPending)
}

// decode returns the pending payment of c's new image, checked to be one.
func decode(c stream.Change) (payments.Payment, error) {
	var p payments.Payment
	if err := c.DecodeNew(&p); err != nil {
		return payments.Payment{}, fmt.Errorf("worker: payment image: %w", err)
	}
	switch {
	case !payments.ValidID(p.ID):
		return payments.Payment{}, fmt.Errorf("worker: payment image: id %q is not a payment ID", p.ID)
	case !tenant.Valid(p.Tenant) || p.PK != payments.PK(p.Tenant, p.ID):
		// A valid tenant and payment ID make a valid provider key (ChargeKey).
		return payments.Payment{}, fmt.Errorf("worker: payment image %s: pk does not match a valid tenant and the id", p.ID)
	}
	return p, nil
}

// errorLevel is the level of a failed record's log line: warn for the
// outcomes a retry is expected to cure, error for the rest.
func errorLevel(err error) slog.Level {
	if transient(err) {
		return slog.LevelWarn
	}
	return slog.LevelError
}

// short reports whether ctx leaves less than the budget of one payment
// before its deadline, and how much it leaves.
func (w *Worker) short(ctx context.Context) (time.Duration, bool) {
	deadline, ok := ctx.Deadline()
	if !ok || w.budget <= 0 {
		return 0, false
	}
	left := time.Until(deadline)
	return left, left < w.budget
}

// transient reports whether err is an outcome a later attempt is expected to
// cure: the provider charged nothing (503, 429, unreachable), its answer was
// lost, or the payments table could not be written.
func transient(err error) bool {
	return errors.Is(err, provider.ErrNotCharged) || errors.Is(err, provider.ErrOutcomeUnknown) ||
		errors.Is(err, payments.ErrUnavailable)
}

// maybeCharged reports whether a transient err leaves a charge possible: the
// provider's answer was lost, or it charged and the settle failed
// (payments.ErrUnavailable comes only from the settle).
func maybeCharged(err error) bool {
	return errors.Is(err, provider.ErrOutcomeUnknown) || errors.Is(err, payments.ErrUnavailable)
}
