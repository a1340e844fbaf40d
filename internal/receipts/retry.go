package receipts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/outbox"
	"github.com/oncehq/once/internal/queue"
)

// retryMessage is a receipt to try again, as sent to the retry queue and,
// at the end, to its dead-letter queue.
type retryMessage struct {
	Tenant string `json:"tenant"`
	// Job is the receipt job's ID.
	Job string `json:"job"`
	// Attempt counts the attempts made so far.
	Attempt int `json:"attempt"`
	// GaveUp is set on a dead letter: when the resender gave up. A dead
	// letter sent back to the retry queue (oncectl dlq redrive) starts its
	// attempts over.
	GaveUp time.Time `json:"gave_up,omitzero"`
	// Claim, Message and Order, set together, are a send the mail API
	// accepted (Message, its ID) under the job's claim Claim that could
	// not be recorded, and the order's key (outbox.Job.OrderPK): the next
	// attempt records the send, fenced on the claim, and sends nothing.
	Claim   string `json:"claim,omitempty"`
	Message string `json:"message,omitempty"`
	Order   string `json:"order,omitempty"`
}

// carry puts u, a send not recorded, of the job whose order is orderPK, in
// m; a nil u takes it out.
func (m *retryMessage) carry(u *unrecorded, orderPK string) {
	if u == nil {
		m.Claim, m.Message, m.Order = "", "", ""
		return
	}
	m.Claim, m.Message, m.Order = u.claim, u.message, orderPK
}

// unrecorded is the send m carries, or nil.
func (m retryMessage) unrecorded() *unrecorded {
	if m.Claim == "" {
		return nil
	}
	return &unrecorded{claim: m.Claim, message: m.Message}
}

// decodeRetry parses and checks a retry message.
func decodeRetry(body string) (retryMessage, error) {
	var m retryMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return retryMessage{}, fmt.Errorf("receipts: retry message: %w", err)
	}
	if m.Tenant == "" || strings.Contains(m.Tenant, "#") || !outbox.ValidJobID(m.Job) || m.Attempt < 1 {
		return retryMessage{}, fmt.Errorf("receipts: retry message: tenant %q, job %q, attempt %d: not a receipt's retry", m.Tenant, m.Job, m.Attempt)
	}
	if carried := m.Claim != "" || m.Message != "" || m.Order != ""; carried &&
		(m.Claim == "" || m.Message == "" || !strings.HasPrefix(m.Order, m.Tenant+"#") || len(m.Order) == len(m.Tenant)+1) {
		return retryMessage{}, fmt.Errorf("receipts: retry message: job %q: a send to record needs its claim, message and the tenant's order", m.Job)
	}
	return m, nil
}

// encode is m as a message body.
func (m retryMessage) encode() string {
	b, _ := json.Marshal(m) // strings, an int and a time: always encodes
	return string(b)
}

// schedule sends m (m.Attempt attempts made) to the retry queue, due after
// the backoff and no earlier than notBefore (the end of a claim that holds
// the job), and returns the delay.
func (s *Sender) schedule(ctx context.Context, m retryMessage, notBefore time.Time) (time.Duration, error) {
	delay := max(queue.Backoff(s.cfg.RetryBase, m.Attempt), notBefore.Sub(s.cfg.Now()))
	if err := s.cfg.Retries.Send(ctx, m.encode(), delay); err != nil {
		return 0, fmt.Errorf("receipts: schedule retry of job %s: %w", m.Job, err)
	}
	s.cfg.Metrics.Count(MetricRetried)
	return delay, nil
}

// HandleRetries is the retry queue's handler (an SQS-triggered Lambda
// handler, the resender function's): it makes one attempt per message,
// concurrently, and reports the messages that failed as batch item
// failures, which the queue delivers again after its visibility timeout and
// moves to its dead-letter queue after its maxReceiveCount. Its error is
// always nil.
func (s *Sender) HandleRetries(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return queue.Process(ctx, ev, s.retry), nil
}

// retry handles one retry message and logs its outcome.
func (s *Sender) retry(ctx context.Context, sm events.SQSMessage) error {
	log := s.log.With("message_id", sm.MessageId)
	m, err := decodeRetry(sm.Body)
	if err != nil {
		log.Error("receipts: retry", "outcome", outcomeError, "err", err)
		return err
	}
	if !m.GaveUp.IsZero() {
		// A dead letter sent back: its attempts start over.
		log.Info("receipts: retry of a dead letter", "tenant", m.Tenant, "job", m.Job, "attempts_before", m.Attempt, "gave_up", m.GaveUp)
		m.Attempt, m.GaveUp = 0, time.Time{}
	}
	log = log.With("tenant", m.Tenant, "job", m.Job, "attempt", m.Attempt+1)
	pk := outbox.JobPK(m.Tenant, m.Job)
	var a attemptResult
	if u := m.unrecorded(); u != nil {
		// An earlier attempt sent the receipt and could not record it:
		// record it, send nothing.
		log = log.With("recording", u.message)
		a = s.record(ctx, outbox.Job{PK: pk, OrderPK: m.Order}, *u)
	} else {
		a = s.attempt(ctx, pk)
	}
	switch a.kind {
	case tried:
		log.Info("receipts: retry", "outcome", a.outcome, "order", a.job.Order)
		return nil
	case triedMissing:
		// Nothing to send, and nothing retrying would find.
		log.Error("receipts: retry", "outcome", outcomeIgnored, "err", a.err)
		return nil
	case triedFailed:
		log.Error("receipts: retry", "outcome", outcomeError, "err", a.err)
		return a.err
	}
	m.Attempt++
	m.carry(a.unrecorded, a.job.OrderPK)
	if m.Attempt >= s.cfg.MaxAttempts {
		return s.giveUp(ctx, log, m, a)
	}
	delay, err := s.schedule(ctx, m, a.notBefore)
	if err != nil {
		err = errors.Join(a.err, err)
		log.Error("receipts: retry", "outcome", outcomeError, "err", err)
		return err
	}
	log.Warn("receipts: retry", "outcome", outcomeRetrying, "retry_in", delay.String(), "err", a.err)
	return nil
}

// giveUp sends m, after its last attempt, to the dead-letter queue, where
// its alarm fires; the job stays in the outbox as the last attempt left it
// (failed, with its attempts and last error, or claimed).
func (s *Sender) giveUp(ctx context.Context, log *slog.Logger, m retryMessage, a attemptResult) error {
	err := errors.New("receipts: no dead-letter queue")
	if s.cfg.DeadLetters != nil {
		m.GaveUp = s.cfg.Now().UTC()
		err = s.cfg.DeadLetters.Send(ctx, m.encode(), 0)
	}
	if err != nil {
		err = fmt.Errorf("receipts: dead-letter job %s after %d attempts: %w", m.Job, m.Attempt, err)
		log.Error("receipts: retry", "outcome", outcomeError, "err", errors.Join(a.err, err))
		return err
	}
	s.cfg.Metrics.Count(MetricDeadLettered)
	log.Error("receipts: retry", "outcome", outcomeDeadLettered, "attempts", m.Attempt, "err", a.err)
	return nil
}
