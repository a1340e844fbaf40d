package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/internal/nilness"
	"github.com/oncehq/once/idempotency/stream"
)

// DefaultSendConcurrency bounds how many checks a Scheduler sends at once.
const DefaultSendConcurrency = 10

// SchedulerConfig configures a Scheduler. Queue is required.
type SchedulerConfig struct {
	// Queue receives the checks.
	Queue Queue
	// Margin is how long after its deadline a check is due: the lease's
	// end for a reservation, the expiry for an UNKNOWN record
	// (DefaultMargin).
	Margin time.Duration
	// Concurrency bounds the sends in flight for one batch
	// (DefaultSendConcurrency).
	Concurrency int
	// Logger receives one line per check sent (debug) and per failure
	// (default: discard).
	Logger *slog.Logger
	// Metrics counts check_scheduled and check_failed.
	Metrics Counter
	// Now returns the current time (time.Now).
	Now func() time.Time
}

// Scheduler handles the idempotency table's stream records of new
// reservations and of records moved to UNKNOWN: for each it sends a Check,
// due when the lease runs out, or for an UNKNOWN record at its expiry (see
// the package documentation). It is safe for concurrent use.
type Scheduler struct {
	cfg SchedulerConfig
}

// NewScheduler returns a Scheduler for cfg, filling in defaults. A Queue
// that is nil, or an interface holding a nil pointer (a *sqsqueue.Queue
// whose sqsqueue.New failed), is an error here rather than a panic at the
// first record.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if nilness.Nil(cfg.Queue) {
		return nil, errors.New("recovery: SchedulerConfig.Queue is required")
	}
	if cfg.Margin <= 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultSendConcurrency
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Metrics = counterOr(cfg.Metrics)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Scheduler{cfg: cfg}, nil
}

// Handle is the stream handler. It sends the batch's checks concurrently and
// reports the first record whose check could not be sent, and every later
// one, as batch item failures, as stream.Process does: Lambda resumes the
// shard from there, and a check sent twice is harmless. It never returns an
// error itself.
func (s *Scheduler) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	errs := make([]error, len(ev.Records))
	sem := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, rec := range ev.Records {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = context.Cause(ctx)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = s.record(ctx, rec)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		failures := make([]events.DynamoDBBatchItemFailure, 0, len(ev.Records)-i)
		for _, r := range ev.Records[i:] {
			failures = append(failures, events.DynamoDBBatchItemFailure{ItemIdentifier: r.Change.SequenceNumber})
		}
		return events.DynamoDBEventResponse{BatchItemFailures: failures}, nil
	}
	return events.DynamoDBEventResponse{}, nil
}

// record sends the check of one stream record, when it makes a reservation
// or a record UNKNOWN.
func (s *Scheduler) record(ctx context.Context, er events.DynamoDBEventRecord) error {
	c := stream.NewChange(er)
	if c.EventName == events.DynamoDBOperationTypeRemove || !checked(dynamo.StreamImageStatus(c.NewImage)) {
		return nil // neither a reservation nor an UNKNOWN record
	}
	log := s.cfg.Logger.With("event_id", c.EventID, "sequence_number", c.SequenceNumber)
	rec, err := dynamo.RecordFromStreamImage(c.NewImage)
	if err != nil {
		err = fmt.Errorf("recovery: schedule: decode new image: %w", err)
		s.cfg.Metrics.Count(MetricCheckFailed)
		log.Error("undecodable record: no check scheduled", "err", err.Error())
		return err
	}
	log = log.With("tenant", rec.Key.Tenant, "key", rec.Key.Short(), "route", rec.Route)
	if sameLease(c, rec) {
		log.Debug("record changed under the same lease: its check is scheduled already")
		return nil
	}
	now := s.cfg.Now()
	delay := delayUntil(rec.ExpiresAt, s.cfg.Margin, now)
	if err := s.cfg.Queue.Send(ctx, NewCheck(rec).Encode(), delay); err != nil {
		err = fmt.Errorf("recovery: schedule check of %s: %w", rec.Key.Short(), err)
		s.cfg.Metrics.Count(MetricCheckFailed)
		log.Error("scheduling the check of a record failed; the record will be retried", "err", err.Error())
		return err
	}
	s.cfg.Metrics.Count(MetricCheckScheduled)
	log.Debug("check scheduled", "status", string(rec.Status), "lease_deadline", rec.ExpiresAt, "delay", delay.String())
	return nil
}

// checked reports whether a record of status s has a check armed: a
// reservation (IN_PROGRESS), due when its lease runs out, or an UNKNOWN
// record, due at its expiry, when the Checker hands it to the reconciler
// again if it is still UNKNOWN under the same lease token.
func checked(s idempotency.Status) bool {
	return s == idempotency.StatusInProgress || s == idempotency.StatusUnknown
}

// sameLease reports whether c's old image is the record rec already: of the
// same status, under the same lease token and deadline, whose check was sent
// when that image was written.
func sameLease(c stream.Change, rec idempotency.Record) bool {
	if dynamo.StreamImageStatus(c.OldImage) != rec.Status {
		return false
	}
	old, err := dynamo.RecordFromStreamImage(c.OldImage)
	return err == nil && old.LeaseToken == rec.LeaseToken && old.ExpiresAt.Equal(rec.ExpiresAt)
}
