package receipts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/mail"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/outbox"
)

// Metric names (EMF, namespace once, dimension Service=receipts or
// resender).
const (
	// MetricSent counts receipts sent and recorded.
	MetricSent = "receipt_sent"
	// MetricDuplicate counts deliveries of a job already sent (or being
	// sent): nothing was sent again.
	MetricDuplicate = "receipt_duplicate"
	// MetricFailed counts send attempts that failed.
	MetricFailed = "receipt_failed"
	// MetricRetried counts the retries sent to the retry queue, one per
	// attempt that did not send.
	MetricRetried = "receipt_retried"
	// MetricDeadLettered counts the receipts given up on after MaxAttempts,
	// sent to the dead-letter queue.
	MetricDeadLettered = "receipt_dead_lettered"
)

// Defaults of Config.
const (
	// DefaultClaimFor is Config.ClaimFor when unset. A live attempt's claim
	// must outlast its invocation: internal/deploytest holds the Timeout of
	// the functions that send receipts (ReceiptsFunction, ResenderFunction)
	// to at most this.
	DefaultClaimFor    = 30 * time.Second
	DefaultKeepSent    = 7 * 24 * time.Hour
	DefaultConcurrency = 10
	// DefaultMaxAttempts is config.DefaultReceiptAttempts.
	DefaultMaxAttempts = 30
	// DefaultRetryBase is the delay before the second attempt.
	DefaultRetryBase = time.Second
)

// Mailer sends mail; *mail.Client is one.
type Mailer interface {
	// Send sends m once, returning the message's ID or an error wrapping
	// mail.ErrNotSent or mail.ErrOutcomeUnknown, or a *mail.StatusError.
	Send(ctx context.Context, m mail.Message) (string, error)
}

// DB is the part of the DynamoDB API the Sender uses; *dynamodb.Client is
// one.
type DB interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Queue delivers a message later: in AWS an SQS queue, each message sent
// with its own DelaySeconds (*sqsqueue.Queue).
type Queue interface {
	// Send enqueues body, to be delivered no earlier than delay (at most
	// 15 minutes) from now.
	Send(ctx context.Context, body string, delay time.Duration) error
}

// Config configures a Sender. DB, Outbox, Orders, Mail and Retries are
// required.
type Config struct {
	DB DB
	// Outbox and Orders are the tables of the receipt jobs and the orders.
	Outbox, Orders string
	Mail           Mailer
	// Retries is the retry queue: a receipt whose attempt did not send
	// (see the package documentation) is tried again from it, after a
	// backoff.
	Retries Queue
	// DeadLetters is the retry queue's dead-letter queue: HandleRetries
	// sends a receipt there after MaxAttempts attempts. Without it, such a
	// retry fails, and the retry queue's redrive policy moves it there
	// after its maxReceiveCount.
	DeadLetters Queue
	// MaxAttempts bounds the attempts at one receipt (DefaultMaxAttempts,
	// at least 2): the first from the stream, the others from Retries.
	MaxAttempts int
	// RetryBase is the delay before the second attempt; it doubles with
	// each attempt, jittered, up to 15 minutes (DefaultRetryBase).
	RetryBase time.Duration
	// Logger receives one line per record or retry (default: discard).
	Logger *slog.Logger
	// Metrics receives the receipt_* metrics (nil discards).
	Metrics *metrics.Emitter
	// Now is the clock (time.Now).
	Now func() time.Time
	// ClaimFor is how long a claim holds a job (DefaultClaimFor): longer
	// than a send and its record can take, since an attempt after it sends
	// again.
	ClaimFor time.Duration
	// KeepSent is how long a sent job is kept (DefaultKeepSent; the
	// outbox table's TTL): longer than a stream record or a retry can be
	// redelivered.
	KeepSent time.Duration
	// Concurrency bounds the jobs of a batch sent at once
	// (DefaultConcurrency).
	Concurrency int
}

// Sender sends the receipt jobs of an outbox table stream, and tries again
// those of its retry queue. It is safe for concurrent use.
type Sender struct {
	cfg Config
	log *slog.Logger
}

// New returns a Sender for cfg, or an error naming every missing
// dependency.
func New(cfg Config) (*Sender, error) {
	var errs []error
	if cfg.DB == nil {
		errs = append(errs, errors.New("receipts: Config.DB is required"))
	}
	if cfg.Outbox == "" || cfg.Orders == "" {
		errs = append(errs, errors.New("receipts: Config.Outbox and Config.Orders are required"))
	}
	if cfg.Mail == nil {
		errs = append(errs, errors.New("receipts: Config.Mail is required"))
	}
	if cfg.Retries == nil {
		errs = append(errs, errors.New("receipts: Config.Retries is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	cfg.MaxAttempts = max(cfg.MaxAttempts, 2)
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = DefaultRetryBase
	}
	if cfg.ClaimFor <= 0 {
		cfg.ClaimFor = DefaultClaimFor
	}
	if cfg.KeepSent <= 0 {
		cfg.KeepSent = DefaultKeepSent
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sender{cfg: cfg, log: log}, nil
}

// Handle sends the receipt jobs of a batch of outbox stream records, each
// on its own and concurrently, once each: a job whose attempt did not send
// goes to the retry queue, and its record succeeds. It reports as batch
// item failures the records that cannot be handled that way (an
// undecodable job, the outbox table failing, the mail API refusing the
// message, the retry queue failing); Lambda retries from the first of them,
// and the ones after it that were sent are then skipped. Its error is always
// nil. It has the signature of stream.Handler and of a Lambda handler.
func (s *Sender) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	failed := make([]bool, len(ev.Records))
	sem := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, rec := range ev.Records {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			failed[i] = s.handleRecord(ctx, rec) != nil
		})
	}
	wg.Wait()
	var resp events.DynamoDBEventResponse
	for i, f := range failed {
		if f {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: ev.Records[i].Change.SequenceNumber})
		}
	}
	return resp, nil
}

// Outcomes of a record or a retry, as logged in the "outcome" attribute.
const (
	outcomeSent         = "sent"
	outcomeDuplicate    = "duplicate"
	outcomeRetrying     = "retrying"
	outcomeDeadLettered = "dead_lettered"
	outcomeIgnored      = "ignored"
	outcomeError        = "error"
)

// handleRecord handles one stream record and logs its outcome.
func (s *Sender) handleRecord(ctx context.Context, rec events.DynamoDBEventRecord) error {
	c := stream.NewChange(rec)
	log := s.log.With("event_id", c.EventID, "sequence_number", c.SequenceNumber)
	if c.EventName != events.DynamoDBOperationTypeInsert || c.NewImage["kind"].DataType() != events.DataTypeString ||
		c.NewImage["kind"].String() != outbox.KindReceipt {
		log.Debug("receipts: record", "outcome", outcomeIgnored, "event_name", string(c.EventName))
		return nil
	}
	var job outbox.Job
	if err := attributevalue.UnmarshalMap(stream.ToSDK(c.NewImage), &job); err != nil || !wellFormed(job) {
		err = fmt.Errorf("receipts: undecodable receipt job (%v)", err)
		log.Error("receipts: record", "outcome", outcomeError, "err", err)
		return err
	}
	log = log.With("tenant", job.Tenant, "order", job.Order, "job", job.ID)
	a := s.attempt(ctx, job.PK)
	switch a.kind {
	case tried:
		log.Info("receipts: record", "outcome", a.outcome, "attempts", a.job.Attempts)
		return nil
	case triedTransient:
		m := retryMessage{Tenant: job.Tenant, Job: job.ID, Attempt: 1}
		m.carry(a.unrecorded, job.OrderPK)
		delay, err := s.schedule(ctx, m, a.notBefore)
		if err == nil {
			log.Warn("receipts: record", "outcome", outcomeRetrying, "attempt", 1, "retry_in", delay.String(), "err", a.err)
			return nil
		}
		a.err = errors.Join(a.err, err)
	}
	log.Error("receipts: record", "outcome", outcomeError, "attempts", a.job.Attempts, "err", a.err)
	return a.err
}

// wellFormed reports whether job has what sending and recording it need.
func wellFormed(job outbox.Job) bool {
	return job.Kind == outbox.KindReceipt && job.PK != "" && job.OrderPK != "" && job.To != "" && job.Tenant != "" &&
		outbox.ValidJobID(job.ID) && job.PK == outbox.JobPK(job.Tenant, job.ID)
}

// attemptKind sorts the results of an attempt.
type attemptKind int

const (
	// tried: the job is sent, by this attempt or an earlier one.
	tried attemptKind = iota
	// triedTransient: nothing was recorded, and another attempt later may
	// send or record: the mail API provably sent nothing (the job
	// released), its answer was lost (the claim kept until notBefore), the
	// send could not be recorded (the claim kept, the send in unrecorded),
	// or another sender holds the job (until notBefore).
	triedTransient
	// triedMissing: the job is not in the outbox.
	triedMissing
	// triedFailed: the mail API refused the message (the job released), the
	// job is not well formed, or the outbox could not be read or written:
	// an error, not a reason to retry with backoff.
	triedFailed
)

// attemptResult is what one attempt at a job did.
type attemptResult struct {
	kind    attemptKind
	outcome string // of a tried attempt: outcomeSent or outcomeDuplicate
	job     outbox.Job
	// notBefore is when the claim that holds the job runs out (zero when
	// the job is released, or when unrecorded is set): an attempt before it
	// finds the job claimed.
	notBefore time.Time
	// unrecorded, on a triedTransient attempt, is the send it made and
	// could not record: the next attempt records it instead of sending.
	unrecorded *unrecorded
	err        error
}

// unrecorded is a send the mail API accepted whose record failed: the claim
// it was made under and the message's ID.
type unrecorded struct {
	claim, message string
}

// record records the send u of job (its PK and OrderPK are what it reads):
// the job sent, fenced on u's claim and on its order, and the order's
// receipt sent. A record that fails otherwise than on the job's condition
// leaves the claim and returns u, for the next attempt to record again,
// whether or not the claim has run out by then; it sends nothing. That
// includes a missing order, which no retry will find: the chain ends in the
// dead-letter queue without sending again. On the job's condition:
//   - the job is sent with u's message: an earlier try of this record landed
//     (a retry message delivered twice); nothing more to do;
//   - the claim is still u's: the order key is not the job's (a retry
//     message that was not built from this job), an error;
//   - otherwise another attempt claimed the job after u's claim ran out, and
//     sends (or sent) a copy of its own: this one is a duplicate.
func (s *Sender) record(ctx context.Context, job outbox.Job, u unrecorded) attemptResult {
	err := s.sent(ctx, job, u.claim, u.message)
	if err == nil {
		s.cfg.Metrics.Count(MetricSent)
		return attemptResult{kind: tried, outcome: outcomeSent, job: job}
	}
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) && len(canceled.CancellationReasons) == 2 &&
		aws.ToString(canceled.CancellationReasons[0].Code) == conditionFailed {
		var current outbox.Job
		if uerr := attributevalue.UnmarshalMap(canceled.CancellationReasons[0].Item, &current); uerr != nil {
			return attemptResult{kind: triedFailed, job: job, err: errors.Join(err, fmt.Errorf("receipts: the job as it stands: %w", uerr))}
		}
		switch {
		case current.State == outbox.Sent && current.Message == u.message:
			s.cfg.Metrics.Count(MetricDuplicate)
			return attemptResult{kind: tried, outcome: outcomeDuplicate, job: current}
		case current.State == outbox.Sending && current.Claim == u.claim:
			return attemptResult{kind: triedFailed, job: job,
				err: fmt.Errorf("receipts: job %s: the order %q to record the send on is not the job's (%q)", job.PK, job.OrderPK, current.OrderPK)}
		}
		s.cfg.Metrics.Count(MetricDuplicate)
		return attemptResult{kind: tried, outcome: outcomeDuplicate, job: current}
	}
	return attemptResult{kind: triedTransient, job: job, unrecorded: &u, err: err}
}

// attempt makes one attempt at the job pk, wherever it comes from: claim
// it (the deduplication: a job sent, or claimed by a live sender, is not
// sent), send it, and record the send.
func (s *Sender) attempt(ctx context.Context, pk string) attemptResult {
	claim, job, err := s.claim(ctx, pk)
	switch {
	case errors.Is(err, errMissing):
		return attemptResult{kind: triedMissing, err: err}
	case err != nil:
		return attemptResult{kind: triedFailed, err: err}
	case claim == "" && job.State == outbox.Sent:
		s.cfg.Metrics.Count(MetricDuplicate)
		return attemptResult{kind: tried, outcome: outcomeDuplicate, job: job}
	case claim == "":
		s.cfg.Metrics.Count(MetricDuplicate)
		until := time.UnixMilli(job.ClaimUntil)
		return attemptResult{kind: triedTransient, job: job, notBefore: until,
			err: fmt.Errorf("receipts: the job is being sent by another attempt (until %s)", until.UTC().Format(time.RFC3339Nano))}
	case !wellFormed(job):
		err := fmt.Errorf("receipts: job %s is not a well-formed receipt job", pk)
		return attemptResult{kind: triedFailed, job: job, err: errors.Join(err, s.release(ctx, job, claim, err))}
	}
	id, err := s.cfg.Mail.Send(ctx, mail.Message{To: job.To, Subject: job.Subject, Text: job.Text, Order: job.Order})
	if err == nil {
		return s.record(ctx, job, unrecorded{claim: claim, message: id})
	}
	s.cfg.Metrics.Count(MetricFailed)
	if errors.Is(err, mail.ErrOutcomeUnknown) {
		// The message may have gone out: the claim stays, and an attempt
		// after it sends again (the window named in the package
		// documentation).
		return attemptResult{kind: triedTransient, job: job, notBefore: time.UnixMilli(job.ClaimUntil), err: err}
	}
	rerr := s.release(ctx, job, claim, err)
	switch {
	case errors.Is(err, mail.ErrNotSent) && rerr == nil:
		return attemptResult{kind: triedTransient, job: job, err: err}
	case errors.Is(err, mail.ErrNotSent):
		// The claim runs out by itself: the attempt after it can claim.
		return attemptResult{kind: triedTransient, job: job, notBefore: time.UnixMilli(job.ClaimUntil), err: errors.Join(err, rerr)}
	}
	return attemptResult{kind: triedFailed, job: job, err: errors.Join(err, rerr)}
}
