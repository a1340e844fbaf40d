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

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/mail"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/outbox"
)

// Metric names (EMF, namespace once, dimension Service=receipts).
const (
	// MetricSent counts receipts sent and recorded.
	MetricSent = "receipt_sent"
	// MetricDuplicate counts deliveries of a job already sent (or being
	// sent): nothing was sent again.
	MetricDuplicate = "receipt_duplicate"
	// MetricFailed counts send attempts that failed.
	MetricFailed = "receipt_failed"
)

// Defaults of Config.
const (
	DefaultTries       = 3
	DefaultBackoff     = 200 * time.Millisecond
	DefaultClaimFor    = 30 * time.Second
	DefaultKeepSent    = 7 * 24 * time.Hour
	DefaultConcurrency = 10
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

// Config configures a Sender. DB, Outbox, Orders and Mail are required.
type Config struct {
	DB DB
	// Outbox and Orders are the tables of the receipt jobs and the orders.
	Outbox, Orders string
	Mail           Mailer
	// Logger receives one line per record (default: discard).
	Logger *slog.Logger
	// Metrics receives receipt_sent, receipt_duplicate, receipt_failed (nil
	// discards).
	Metrics *metrics.Emitter
	// Now is the clock (time.Now).
	Now func() time.Time
	// Tries is how many sends of one job an invocation tries
	// (DefaultTries); Backoff the pause before the second, doubling for
	// each later one (DefaultBackoff).
	Tries   int
	Backoff time.Duration
	// ClaimFor is how long a claim holds a job (DefaultClaimFor): longer
	// than a send and its record can take, since a redelivery after it
	// sends again.
	ClaimFor time.Duration
	// KeepSent is how long a sent job is kept (DefaultKeepSent; the
	// outbox table's TTL): longer than a stream record can be redelivered.
	KeepSent time.Duration
	// Concurrency bounds the jobs of a batch sent at once
	// (DefaultConcurrency).
	Concurrency int
}

// Sender sends the receipt jobs of an outbox table stream. It is safe for
// concurrent use.
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
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tries <= 0 {
		cfg.Tries = DefaultTries
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
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
// on its own and concurrently, and reports every record whose job could not
// be sent as a batch item failure (Lambda retries from the first of them;
// the ones after it that were sent are then skipped). Its error is always
// nil. It has the signature of stream.Handler and of a Lambda handler.
func (s *Sender) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	failed := make([]bool, len(ev.Records))
	sem := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, rec := range ev.Records {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			failed[i] = s.record(ctx, rec) != nil
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

// Outcomes of a record, as logged in the "outcome" attribute.
const (
	outcomeSent      = "sent"
	outcomeDuplicate = "duplicate"
	outcomeIgnored   = "ignored"
	outcomeError     = "error"
)

// record handles one stream record and logs its outcome.
func (s *Sender) record(ctx context.Context, rec events.DynamoDBEventRecord) error {
	c := stream.NewChange(rec)
	log := s.log.With("event_id", c.EventID, "sequence_number", c.SequenceNumber)
	if c.EventName != events.DynamoDBOperationTypeInsert || c.NewImage["kind"].DataType() != events.DataTypeString ||
		c.NewImage["kind"].String() != outbox.KindReceipt {
		log.Debug("receipts: record", "outcome", outcomeIgnored, "event_name", string(c.EventName))
		return nil
	}
	var job outbox.Job
	if err := attributevalue.UnmarshalMap(stream.ToSDK(c.NewImage), &job); err != nil || job.PK == "" || job.OrderPK == "" || job.To == "" {
		err = fmt.Errorf("receipts: undecodable receipt job (%v)", err)
		log.Error("receipts: record", "outcome", outcomeError, "err", err)
		return err
	}
	log = log.With("tenant", job.Tenant, "order", job.Order, "job", job.ID)
	outcome, attempts, err := s.deliver(ctx, log, job)
	if err != nil {
		log.Error("receipts: record", "outcome", outcomeError, "attempts", attempts, "err", err)
		return err
	}
	log.Info("receipts: record", "outcome", outcome, "attempts", attempts)
	return nil
}

// errClaimed: a live claim of another sender holds the job.
var errClaimed = errors.New("receipts: the job is being sent by another delivery")

// deliver sends job unless it is sent or being sent, retrying a send that
// provably sent nothing up to Tries times. attempts is the job's count of
// claims so far.
func (s *Sender) deliver(ctx context.Context, log *slog.Logger, job outbox.Job) (outcome string, attempts int, err error) {
	for try := 1; ; try++ {
		claim, current, err := s.claim(ctx, job)
		switch {
		case err != nil:
			return "", current.Attempts, err
		case claim == "" && current.State == outbox.Sent:
			s.cfg.Metrics.Count(MetricDuplicate)
			return outcomeDuplicate, current.Attempts, nil
		case claim == "":
			s.cfg.Metrics.Count(MetricDuplicate)
			return "", current.Attempts, fmt.Errorf("%w (until %s)", errClaimed, time.UnixMilli(current.ClaimUntil).UTC().Format(time.RFC3339Nano))
		}
		id, err := s.cfg.Mail.Send(ctx, mail.Message{To: job.To, Subject: job.Subject, Text: job.Text, Order: job.Order})
		if err == nil {
			if err := s.sent(ctx, job, claim, id); err != nil {
				return "", current.Attempts, err
			}
			s.cfg.Metrics.Count(MetricSent)
			return outcomeSent, current.Attempts, nil
		}
		s.cfg.Metrics.Count(MetricFailed)
		if errors.Is(err, mail.ErrOutcomeUnknown) {
			// The message may have gone out: the claim stays, and a
			// redelivery after it sends again (the window named in the
			// package documentation).
			return "", current.Attempts, err
		}
		if rerr := s.release(ctx, job, claim, err); rerr != nil {
			log.Warn("receipts: release of a failed attempt", "err", rerr)
		}
		if try >= s.cfg.Tries || !errors.Is(err, mail.ErrNotSent) {
			return "", current.Attempts, err
		}
		log.Info("receipts: send failed; retrying", "attempt", try, "err", err)
		t := time.NewTimer(s.cfg.Backoff << (try - 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", current.Attempts, fmt.Errorf("receipts: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

// Attribute names of a job item (outbox.Job) that the sender writes.
var jobNames = map[string]string{
	"#pk": outbox.KeyAttr, "#state": "state", "#claim": "claim", "#until": "claim_until", "#attempts": "attempts",
	"#error": "last_error", "#sent": "sent_at", "#expires": outbox.TTLAttr, "#message": "message",
}

func jobKey(job outbox.Job) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{outbox.KeyAttr: &types.AttributeValueMemberS{Value: job.PK}}
}

func names(keys ...string) map[string]string {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = jobNames[k]
	}
	return out
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func num(n int64) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(n)} }

// claim claims job for one send: the conditional write before sending. It
// returns the claim's token, or "" and the job as it stands when it is sent
// or held by a live claim.
func (s *Sender) claim(ctx context.Context, job outbox.Job) (string, outbox.Job, error) {
	now := s.cfg.Now()
	token := idempotency.NewToken()
	out, err := s.cfg.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.cfg.Outbox),
		Key:              jobKey(job),
		UpdateExpression: aws.String("SET #state = :sending, #claim = :token, #until = :until ADD #attempts :one"),
		ConditionExpression: aws.String("attribute_exists(#pk) AND (#state IN (:queued, :failed) OR " +
			"(#state = :sending AND #until <= :now))"),
		ExpressionAttributeNames: names("#pk", "#state", "#claim", "#until", "#attempts"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":sending": str(string(outbox.Sending)), ":queued": str(string(outbox.Queued)), ":failed": str(string(outbox.Failed)),
			":token": str(token), ":until": num(now.Add(s.cfg.ClaimFor).UnixMilli()), ":now": num(now.UnixMilli()), ":one": num(1),
		},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed) && len(failed.Item) == 0:
		return "", job, fmt.Errorf("receipts: claim: job %s is not in the outbox", job.ID)
	case errors.As(err, &failed):
		var current outbox.Job
		if err := attributevalue.UnmarshalMap(failed.Item, &current); err != nil {
			return "", job, fmt.Errorf("receipts: claim: %w", err)
		}
		if current.Claim == token {
			// The SDK retried the write after it had landed: the claim is
			// ours.
			return token, current, nil
		}
		return "", current, nil
	case err != nil:
		return "", job, fmt.Errorf("receipts: claim: %w", err)
	}
	var current outbox.Job
	if err := attributevalue.UnmarshalMap(out.Attributes, &current); err != nil {
		return "", job, fmt.Errorf("receipts: claim: %w", err)
	}
	return token, current, nil
}

// sent records the send: the job sent (fenced on the claim), kept for
// KeepSent, and the order's receipt sent, in one transaction.
func (s *Sender) sent(ctx context.Context, job outbox.Job, claim, messageID string) error {
	now := s.cfg.Now()
	_, err := s.cfg.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                aws.String(s.cfg.Outbox),
			Key:                      jobKey(job),
			UpdateExpression:         aws.String("SET #state = :sent, #sent = :at, #expires = :expires, #message = :message REMOVE #claim, #until"),
			ConditionExpression:      aws.String("#claim = :token"),
			ExpressionAttributeNames: names("#state", "#sent", "#expires", "#message", "#claim", "#until"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":sent": str(string(outbox.Sent)), ":at": num(now.Unix()), ":expires": num(now.Add(s.cfg.KeepSent).Unix()),
				":message": str(messageID), ":token": str(claim),
			},
		}},
		{Update: &types.Update{
			TableName:                aws.String(s.cfg.Orders),
			Key:                      map[string]types.AttributeValue{outbox.KeyAttr: str(job.OrderPK)},
			UpdateExpression:         aws.String("SET #receipt = :sent, #sent_at = :at"),
			ConditionExpression:      aws.String("attribute_exists(#pk)"),
			ExpressionAttributeNames: map[string]string{"#pk": outbox.KeyAttr, "#receipt": outbox.OrderReceipt, "#sent_at": outbox.OrderReceiptSentAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":sent": str(outbox.ReceiptSent), ":at": num(now.Unix()),
			},
		}},
	}})
	if err != nil {
		return fmt.Errorf("receipts: record the send of message %s: %w", messageID, err)
	}
	return nil
}

// release gives the claim of a failed attempt up: the job is failed, with
// why, and a redelivery may claim it at once.
func (s *Sender) release(ctx context.Context, job outbox.Job, claim string, cause error) error {
	_, err := s.cfg.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.cfg.Outbox),
		Key:                      jobKey(job),
		UpdateExpression:         aws.String("SET #state = :failed, #error = :error REMOVE #claim, #until"),
		ConditionExpression:      aws.String("#claim = :token"),
		ExpressionAttributeNames: names("#state", "#error", "#claim", "#until"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":failed": str(string(outbox.Failed)), ":error": str(cause.Error()), ":token": str(claim),
		},
	})
	if err != nil {
		return fmt.Errorf("receipts: release: %w", err)
	}
	return nil
}
