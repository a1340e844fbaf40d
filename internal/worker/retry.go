package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/tenant"
)

// Defaults of Config's retry settings.
const (
	// DefaultRetryWindow outlasts most provider outages (config's
	// ONCE_WORKER_RETRY_WINDOW default).
	DefaultRetryWindow = 6 * time.Hour
	// DefaultRetryBase is the delay before the second attempt.
	DefaultRetryBase = time.Second
	// MaxRetryDelay caps the delay between attempts: SQS's longest
	// DelaySeconds.
	MaxRetryDelay = queue.MaxDelay
	// DefaultLookUpHorizon is how long after the first look-up of a
	// payment's charge at the end of its retry window failed look-ups are
	// made again, the retrier sending the message back itself, before the
	// message fails and goes to the dead-letter queue (Config.LookUpHorizon;
	// config's ONCE_WORKER_LOOKUP_HORIZON default).
	DefaultLookUpHorizon = 24 * time.Hour
	// DefaultCallTimeout is the provider client's default bound on a call.
	DefaultCallTimeout = 5 * time.Second
)

// Queue delivers a retry later: in AWS the worker's retry queue, an SQS
// queue, each message sent with its own DelaySeconds (*sqsqueue.Queue).
type Queue interface {
	// Send enqueues body, to be delivered no earlier than delay (at most
	// MaxRetryDelay) from now.
	Send(ctx context.Context, body string, delay time.Duration) error
}

// retryMessage is a payment to charge again, as sent to the retry queue.
type retryMessage struct {
	Tenant  string `json:"tenant"`
	Payment string `json:"payment"`
	// Attempt counts the charge attempts made so far.
	Attempt int `json:"attempt"`
	// Unknown is when the latest attempt that may have charged was made
	// (its answer was lost, or it charged and the settle failed); zero when
	// every attempt provably charged nothing.
	Unknown time.Time `json:"unknown,omitzero"`
	// LookUps counts the look-ups of the charge, at the end of the window,
	// that failed, or whose settle could not be written: the message was
	// sent back to look it up (and settle) again.
	LookUps int `json:"lookups,omitzero"`
	// ReadFailed is when the first of the latest run of failed reads of
	// the payment (the payments table unavailable) was made: the message
	// was sent back to read it again (readAgain), until LookUpHorizon
	// after it. Zero once a read succeeds. It bounds the run without the
	// payment, which the failed read did not get.
	ReadFailed time.Time `json:"read_failed,omitzero"`
	// Reads counts the failed reads of that run, for their backoff.
	Reads int `json:"reads,omitzero"`
}

// RetryBody returns the retry queue message of tenant's payment id, as the
// worker and the retrier send it: attempts charge attempts made so far (at
// least 1), the latest that may have charged made at unknown (zero when
// every attempt provably charged nothing; at the end of its window the
// retrier looks its charge up either way, CallTimeout after the later of
// the window's end and unknown).
// It is for a tool that hands a payment to the retrier itself (oncectl
// requeue-payment); it returns an error for a message the retrier would
// refuse.
func RetryBody(tenant, id string, attempts int, unknown time.Time) (string, error) {
	b, _ := json.Marshal(retryMessage{Tenant: tenant, Payment: id, Attempt: attempts, Unknown: unknown}) // always encodes
	if _, err := decodeRetry(string(b)); err != nil {
		return "", err
	}
	return string(b), nil
}

// decodeRetry parses and checks a retry message.
func decodeRetry(body string) (retryMessage, error) {
	var m retryMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return retryMessage{}, fmt.Errorf("worker: retry message: %w", err)
	}
	if !tenant.Valid(m.Tenant) || !payments.ValidID(m.Payment) || m.Attempt < 1 {
		return retryMessage{}, fmt.Errorf("worker: retry message: tenant %q, payment %q, attempt %d: not a payment's retry", m.Tenant, m.Payment, m.Attempt)
	}
	return m, nil
}

// backoff is the delay before the attempt after attempt (from 1):
// queue.Backoff from RetryBase.
func (w *Worker) backoff(attempt int) time.Duration {
	return queue.Backoff(w.base, attempt)
}

// schedule sends the retry of p described by m (m.Attempt attempts made),
// due after the backoff, and returns the delay. A retry the backoff would
// bring after the end of p's retry window makes no attempt: it is due when
// giveUp can look the charge up (lookUpAt), so that it does so at once.
func (w *Worker) schedule(ctx context.Context, p payments.Payment, m retryMessage) (time.Duration, error) {
	now := w.now()
	delay := w.backoff(m.Attempt)
	if now.Add(delay).After(p.Created.Add(w.window)) {
		delay = max(w.lookUpAt(p, m).Sub(now), 0)
	}
	return delay, w.send(ctx, m, delay)
}

// lookUpAt is when the retrier may look the charge of p up at the end of its
// retry window: CallTimeout after the later of the window's end and the
// latest attempt that may have charged (m.Unknown). Until then a request of
// an attempt may still be on its way to the provider: one the retrier or the
// stream made just before the window's end (a duplicate of the message, a
// redelivered record), or the one m says may have charged.
func (w *Worker) lookUpAt(p payments.Payment, m retryMessage) time.Time {
	last := p.Created.Add(w.window)
	if m.Unknown.After(last) {
		last = m.Unknown
	}
	return last.Add(w.call)
}

// send sends m with delay.
func (w *Worker) send(ctx context.Context, m retryMessage, delay time.Duration) error {
	b, _ := json.Marshal(m) // strings, an int and a time: always encodes
	if err := w.retries.Send(ctx, string(b), delay); err != nil {
		return fmt.Errorf("worker: schedule retry of payment %s: %w", m.Payment, err)
	}
	w.metrics.Count(MetricRetried)
	return nil
}

// HandleRetries is the retry queue's handler (an SQS-triggered Lambda
// handler): it makes one attempt per message, concurrently, and reports the
// messages that failed as batch item failures, which the queue delivers
// again after its visibility timeout and moves to its dead-letter queue
// after its maxReceiveCount. Its error is always nil.
func (w *Worker) HandleRetries(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return queue.Process(ctx, ev, w.retry), nil
}

// retry handles one retry message and logs its outcome.
func (w *Worker) retry(ctx context.Context, sm events.SQSMessage) error {
	log := w.log.With("message_id", sm.MessageId)
	m, err := decodeRetry(sm.Body)
	if err != nil {
		log.Error("worker: retry", "outcome", outcomeError, "err", err)
		return err
	}
	log = log.With("tenant", m.Tenant, "payment", m.Payment, "attempt", m.Attempt+1)
	p, err := w.settler.Get(ctx, m.Tenant, m.Payment)
	switch {
	case errors.Is(err, payments.ErrNotFound):
		// Nothing to charge, and nothing retrying would find.
		log.Error("worker: retry", "outcome", outcomeIgnored, "err", err)
		return nil
	case errors.Is(err, payments.ErrUnavailable):
		return w.readAgain(ctx, log, m, err)
	case err != nil:
		log.Warn("worker: retry", "outcome", outcomeError, "err", err)
		return err
	case p.Status != payments.StatusPending:
		log.Info("worker: retry", "outcome", outcomeAlreadySettled, "status", string(p.Status))
		return nil
	}
	m.ReadFailed, m.Reads = time.Time{}, 0 // the run of failed reads, if any, is over
	if !w.now().Before(p.Created.Add(w.window)) {
		return w.giveUp(ctx, log, p, m)
	}
	res, err := w.process(ctx, p)
	if err != nil && transient(err) {
		m.Attempt++
		if maybeCharged(err) {
			m.Unknown = w.now()
		}
		if !w.now().Before(p.Created.Add(w.window)) {
			log.Warn("worker: retry", "outcome", outcomeError, "err", err)
			return w.giveUp(ctx, log, p, m)
		}
		delay, serr := w.schedule(ctx, p, m)
		if serr == nil {
			log.Warn("worker: retry", "outcome", outcomeRetrying, "retry_in", delay.String(), "err", err)
			return nil
		}
		err = errors.Join(err, serr)
	}
	if err != nil {
		log.Log(ctx, errorLevel(err), "worker: retry", "outcome", outcomeError, "err", err)
		return err
	}
	logResult(ctx, log, "worker: retry", res)
	return nil
}

// giveUp settles p at the end of its retry window, without charging again,
// as the provider's record of its charge says: succeeded with the charge
// found, failed with its failure code when it failed, failed with
// provider_unavailable when there is none. The charge is always looked up,
// once no attempt can be in flight (lookUpAt): an attempt outside m's chain
// may have charged (a stream invocation that crashed after its charge, a
// duplicate of the message), whatever m says. A look-up that fails settles
// nothing, and a settle that cannot be written (payments.ErrUnavailable)
// after a look-up that succeeded is not retried here: both send m back to
// look up and settle again (lookUpAgain). The settle is conditional on p
// being pending, so a repeat of one that was written after all is a no-op
// (the retry finds p settled).
func (w *Worker) giveUp(ctx context.Context, log *slog.Logger, p payments.Payment, m retryMessage) error {
	if at := w.lookUpAt(p, m); w.now().Before(at) {
		delay := at.Sub(w.now())
		if err := w.send(ctx, m, delay); err != nil {
			log.Warn("worker: retry", "outcome", outcomeError, "err", err)
			return err
		}
		log.Info("worker: retry", "outcome", outcomeRetrying, "retry_in", delay.String(), "look_up", true)
		return nil
	}
	var s settlement
	ch, err := w.charger.Lookup(ctx, ChargeKey(p.Tenant, p.ID))
	switch {
	case errors.Is(err, provider.ErrNoCharge):
		s = settlement{status: payments.StatusFailed, failureCode: unavailableCode}
	case err != nil:
		return w.lookUpAgain(ctx, log, p, m, MetricLookUpFailed, fmt.Errorf("worker: look up the charge of payment %s: %w", p.ID, err))
	case ch.Status == provider.StatusSucceeded && ch.ID != "":
		s = settlement{status: payments.StatusSucceeded, chargeID: ch.ID}
	case ch.Status == provider.StatusFailed:
		code := ch.FailureCode
		if code == "" {
			code = declinedCode
		}
		s = settlement{status: payments.StatusFailed, chargeID: ch.ID, failureCode: code}
	default:
		// Not an answer to settle on.
		return w.lookUpAgain(ctx, log, p, m, MetricLookUpFailed, fmt.Errorf("worker: look up the charge of payment %s: charge %q has status %q", p.ID, ch.ID, ch.Status))
	}
	res, err := w.settle(ctx, p, s)
	switch {
	case errors.Is(err, payments.ErrUnavailable):
		// The answer is the provider's, and stays so: looked up again
		// next time, and settled then, as a failed look-up is.
		return w.lookUpAgain(ctx, log, p, m, MetricSettleFailed, err)
	case err != nil:
		log.Warn("worker: retry", "outcome", outcomeError, "err", err)
		return err
	}
	logResult(ctx, log.With("retry_window", w.window.String()), "worker: retry", res)
	return nil
}

// lookUpAgain handles a look-up of p's charge that failed with err (the
// provider down, an answer that is not its record), or a settle on its
// answer that could not be written (the payments table unavailable).
// Before the look-up horizon (LookUpHorizon after lookUpAt) it sends m back
// itself, one more look-up counted, due after the backoff of its look-ups
// (from RetryBase, at most MaxRetryDelay, and no later than the horizon),
// and the message succeeds: an outage at the window's end does not use up
// the queue's receives. Once the horizon is reached, or when m cannot be
// sent, it returns the error: the message fails, the queue delivers it
// again, up to its maxReceiveCount, then moves it to its dead-letter queue
// (alarmed), the payment still pending. Each call counts failed, the
// metric of what failed (MetricLookUpFailed: the provider;
// MetricSettleFailed: the payments table), whose persistence is alarmed:
// an outage shorter than the horizon fails no message.
func (w *Worker) lookUpAgain(ctx context.Context, log *slog.Logger, p payments.Payment, m retryMessage, failed string, err error) error {
	w.metrics.Count(failed)
	now := w.now()
	horizon := w.lookUpAt(p, m).Add(w.horizon)
	if !now.Before(horizon) {
		err = fmt.Errorf("%w (look-up horizon %s reached after %d look-ups)", err, w.horizon, m.LookUps+1)
		log.Error("worker: retry", "outcome", outcomeError, "look_ups", m.LookUps+1, "err", err)
		return err
	}
	m.LookUps++
	delay := min(w.backoff(m.LookUps), horizon.Sub(now))
	if serr := w.send(ctx, m, delay); serr != nil {
		err = errors.Join(err, serr)
		log.Warn("worker: retry", "outcome", outcomeError, "look_ups", m.LookUps, "err", err)
		return err
	}
	log.Warn("worker: retry", "outcome", outcomeRetrying, "retry_in", delay.String(), "look_up", true, "look_ups", m.LookUps, "err", err)
	return nil
}

// readAgain handles a read of m's payment that failed with err wrapping
// payments.ErrUnavailable (DynamoDB unreachable or throttling, past the
// client's own retries). The message carries the run of failed reads it is
// in (m.ReadFailed, set now at the first, never later than now): before
// LookUpHorizon has passed since that first failed read, it sends m back
// itself, one more read counted, due after the backoff of the run's reads
// (from RetryBase, at most MaxRetryDelay, no later than the horizon), and
// the message succeeds: an outage of the payments table does not use up
// the queue's receives and dead-letter the payment within half an hour.
// Once the horizon is reached, or when m cannot be sent, it returns the
// error: the message fails, the queue delivers it again, up to its
// maxReceiveCount, then moves it to its dead-letter queue (alarmed).
// Each failed read counts MetricReadFailed, whose persistence is alarmed:
// an outage shorter than the horizon fails no message.
//
// Every chain of messages still ends: a read that succeeds clears the run
// and carries on as before (an attempt before the payment's retry window
// ends, a look-up before its look-up horizon, and after that no message is
// sent), so past the payment's look-up horizon a run is never cleared
// again and ends LookUpHorizon after it began.
func (w *Worker) readAgain(ctx context.Context, log *slog.Logger, m retryMessage, err error) error {
	w.metrics.Count(MetricReadFailed)
	now := w.now()
	if m.ReadFailed.IsZero() || m.ReadFailed.After(now) {
		m.ReadFailed = now
	}
	horizon := m.ReadFailed.Add(w.horizon)
	if !now.Before(horizon) {
		err = fmt.Errorf("%w (read horizon %s reached after %d reads)", err, w.horizon, m.Reads+1)
		log.Error("worker: retry", "outcome", outcomeError, "read_again", true, "reads", m.Reads+1, "err", err)
		return err
	}
	m.Reads++
	delay := min(w.backoff(m.Reads), horizon.Sub(now))
	if serr := w.send(ctx, m, delay); serr != nil {
		err = errors.Join(err, serr)
		log.Warn("worker: retry", "outcome", outcomeError, "read_again", true, "reads", m.Reads, "err", err)
		return err
	}
	log.Warn("worker: retry", "outcome", outcomeRetrying, "retry_in", delay.String(), "read_again", true, "reads", m.Reads, "err", err)
	return nil
}
