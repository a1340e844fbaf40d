package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// shardReader reads one shard from its start position (or checkpoint) to
// its end and delivers the records.
type shardReader struct {
	p         *Poller
	streamARN string
	region    string
	shardID   string
	start     streamtypes.ShardIteratorType
	log       *slog.Logger

	// checkpoint is the sequence number of the last record handled
	// (delivered successfully or dead-lettered); "" before the first.
	checkpoint string
}

// run reads the shard until it ends (true) or ctx is done (false).
func (s *shardReader) run(ctx context.Context) bool {
	s.log.Debug("reading shard", "start_at", string(s.start))
	var (
		iter  *string
		fails int
		stale int                     // reads in a row answered "trimmed" or "expired"
		idle  = s.p.opts.PollInterval // the pause after an empty read
	)
	for ctx.Err() == nil {
		if iter == nil {
			it, err := s.iterator(ctx)
			switch {
			case ctx.Err() != nil:
				return false
			case isNotFound(err):
				s.log.Warn("shard no longer exists", "err", err)
				return true
			case isTrimmed(err) && s.checkpoint != "":
				s.log.Warn("records after the checkpoint were trimmed from the stream; resuming at TRIM_HORIZON",
					"checkpoint", s.checkpoint)
				s.checkpoint = ""
				s.start = streamtypes.ShardIteratorTypeTrimHorizon
				continue
			case err != nil:
				fails++
				s.log.Warn("get shard iterator failed", "err", err, "attempt", fails)
				sleep(ctx, s.p.backoff(fails))
				continue
			}
			iter = it
		}
		// As many records as one call returns, whatever the batch size:
		// DynamoDB Local spends milliseconds on each GetRecords, and a
		// poller that read a small batch per call would call it back to
		// back while records flow. The handler still gets them in batches.
		out, err := s.p.opts.Client.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{
			ShardIterator: iter,
			Limit:         aws.Int32(MaxBatchSize),
		})
		switch {
		case ctx.Err() != nil:
			return false
		case isExpired(err):
			// An iterator lives 15 minutes; a fresh one that expires at
			// once again waits a bounded backoff, so the loop cannot spin.
			stale++
			iter = nil
			s.log.Info("shard iterator expired; resuming after the checkpoint", "checkpoint", s.checkpoint, "attempt", stale)
			if stale > 1 {
				sleep(ctx, s.p.backoff(stale-1))
			}
			continue
		case isNotFound(err):
			s.log.Warn("shard no longer exists", "err", err)
			return true
		case isTrimmed(err):
			// A fresh iterator resumes after the checkpoint or, before
			// the first record, at the start again. DynamoDB Local
			// answers so at times for the TRIM_HORIZON iterator of a
			// shard it has just created, so the first such answer before
			// anything was read is not a warning; a repeated one waits
			// a bounded backoff, so the loop cannot spin.
			stale++
			iter = nil
			if stale == 1 && s.checkpoint == "" && s.start == streamtypes.ShardIteratorTypeTrimHorizon {
				s.log.Info("shard iterator taken before the first record points at trimmed records; taking a new one")
				continue
			}
			s.log.Warn("shard iterator points at trimmed records", "err", err, "attempt", stale)
			sleep(ctx, s.p.backoff(stale))
			continue
		case err != nil:
			fails++
			s.log.Warn("get records failed", "err", err, "attempt", fails)
			sleep(ctx, s.p.backoff(fails))
			continue
		}
		fails, stale = 0, 0
		delivered := 0
		if len(out.Records) > 0 {
			var ok bool
			if delivered, ok = s.deliver(ctx, out.Records); !ok {
				return false
			}
		}
		iter = out.NextShardIterator
		if iter == nil {
			s.log.Debug("shard closed and read to its end", "checkpoint", s.checkpoint)
			return true
		}
		switch {
		case delivered == 0 && len(out.Records) < MaxBatchSize:
			// Nothing for the function (no record, or none its filter
			// passes): the mapping is idle.
			sleep(ctx, idle)
			idle = min(2*idle, max(s.p.opts.MaxIdleInterval, s.p.opts.PollInterval))
		case len(out.Records) < MaxBatchSize:
			idle = s.p.opts.PollInterval
			sleep(ctx, idle)
		default:
			idle = s.p.opts.PollInterval
		}
	}
	return false
}

// iterator returns a shard iterator just after the checkpoint or, without
// one, at the start position.
func (s *shardReader) iterator(ctx context.Context) (*string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{
		StreamArn:         aws.String(s.streamARN),
		ShardId:           aws.String(s.shardID),
		ShardIteratorType: s.start,
	}
	if s.checkpoint != "" {
		in.ShardIteratorType = streamtypes.ShardIteratorTypeAfterSequenceNumber
		in.SequenceNumber = aws.String(s.checkpoint)
	}
	out, err := s.p.opts.Client.GetShardIterator(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("stream: get shard iterator: %w", err)
	}
	if out.ShardIterator == nil {
		return nil, errors.New("stream: get shard iterator: no iterator returned")
	}
	return out.ShardIterator, nil
}

// deliver hands the records of one GetRecords call that pass the filter to
// the handler, in batches of at most BatchSize, and returns how many records
// it handled (delivered or dead-lettered), and false if ctx ended first. A record that cannot be converted to
// the event form (an attribute type this SDK does not know) goes to the dead
// letter in its place.
func (s *shardReader) deliver(ctx context.Context, raw []streamtypes.Record) (int, bool) {
	delivered := 0
	for len(raw) > 0 {
		var (
			batch []events.DynamoDBEventRecord
			bad   *events.DynamoDBEventRecord
			why   error
		)
		for len(raw) > 0 {
			rec, err := toEvent(raw[0], s.streamARN, s.region)
			if err != nil {
				bad, why = &rec, err
				break
			}
			if s.p.keep(rec) {
				batch = append(batch, rec)
			}
			raw = raw[1:]
		}
		for len(batch) > 0 {
			n := min(len(batch), s.p.opts.BatchSize)
			if !s.deliverBatch(ctx, batch[:n]) {
				return delivered, false
			}
			delivered += n
			batch = batch[n:]
		}
		if bad != nil {
			s.deadLetter(ctx, []events.DynamoDBEventRecord{*bad}, why.Error(), 0)
			delivered++
			raw = raw[1:]
		}
	}
	return delivered, true
}

// pending is a run of records awaiting delivery and the failed attempts
// counted against it.
type pending struct {
	recs     []events.DynamoDBEventRecord
	attempts int
}

// deliverBatch invokes the handler until every record of batch has been
// delivered or dead-lettered, and returns false if ctx ended first.
func (s *shardReader) deliverBatch(ctx context.Context, batch []events.DynamoDBEventRecord) bool {
	maxRetries := s.p.opts.MaxRetryAttempts
	bisect := s.p.opts.BisectOnError
	queue := []pending{{recs: batch}}
	for len(queue) > 0 {
		if ctx.Err() != nil {
			return false
		}
		b := &queue[0]
		resp, err := s.invoke(ctx, b.recs)
		if ctx.Err() != nil {
			// A failure caused by shutdown is not the batch's fault.
			return false
		}
		next, partial, reason := outcome(b.recs, resp, err)
		var attempts int
		switch {
		case next == len(b.recs):
			s.checkpoint = b.recs[len(b.recs)-1].Change.SequenceNumber
			queue = queue[1:]
			continue
		case partial:
			if next > 0 {
				s.checkpoint = b.recs[next-1].Change.SequenceNumber
				b.recs, b.attempts = b.recs[next:], 0
			}
			b.attempts++
			attempts = b.attempts
			s.log.Warn("stream batch item failure", "sequence_number", b.recs[0].Change.SequenceNumber,
				"records", len(b.recs), "attempt", b.attempts)
			if b.attempts > maxRetries {
				n := len(b.recs)
				if bisect {
					n = 1
				}
				s.deadLetter(ctx, b.recs[:n], reason, b.attempts)
				b.recs, b.attempts = b.recs[n:], 0
				if len(b.recs) == 0 {
					queue = queue[1:]
				}
				continue
			}
		case bisect && len(b.recs) > 1:
			h := (len(b.recs) + 1) / 2
			s.log.Warn("stream batch failed; bisecting", "err", reason,
				"sequence_number", b.recs[0].Change.SequenceNumber, "records", len(b.recs), "attempt", b.attempts)
			halves := []pending{{recs: b.recs[:h], attempts: b.attempts}, {recs: b.recs[h:], attempts: b.attempts}}
			attempts = b.attempts
			queue = append(halves, queue[1:]...)
		default:
			b.attempts++
			attempts = b.attempts
			s.log.Warn("stream batch failed", "err", reason,
				"sequence_number", b.recs[0].Change.SequenceNumber, "records", len(b.recs), "attempt", b.attempts)
			if b.attempts > maxRetries {
				s.deadLetter(ctx, b.recs, reason, b.attempts)
				queue = queue[1:]
				continue
			}
		}
		sleep(ctx, s.p.backoff(max(attempts, 1)))
	}
	return true
}

// outcome reads an invocation's result as Lambda does: next is the index of
// the first record to retry (len(recs) when the batch succeeded), and partial
// tells valid batch item failures from a failure of the whole batch.
func outcome(recs []events.DynamoDBEventRecord, resp events.DynamoDBEventResponse, err error) (next int, partial bool, reason string) {
	if err != nil {
		return 0, false, "handler error: " + err.Error()
	}
	if len(resp.BatchItemFailures) == 0 {
		return len(recs), false, ""
	}
	index := make(map[string]int, len(recs))
	for i, r := range recs {
		index[r.Change.SequenceNumber] = i
	}
	next = len(recs)
	for _, f := range resp.BatchItemFailures {
		i, ok := index[f.ItemIdentifier]
		if f.ItemIdentifier == "" || !ok {
			return 0, false, fmt.Sprintf("batch item failure %q names no record of the batch", f.ItemIdentifier)
		}
		next = min(next, i)
	}
	return next, true, "batch item failure"
}

// invoke calls the handler with a fresh copy of the records, decoded from
// the JSON Lambda would send, so that the handler sees what Lambda would
// give it and cannot change the records the poller retries. A panic is a
// handler error.
func (s *shardReader) invoke(ctx context.Context, recs []events.DynamoDBEventRecord) (resp events.DynamoDBEventResponse, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("stream handler panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", v)
		}
	}()
	b, err := json.Marshal(events.DynamoDBEvent{Records: recs})
	if err != nil {
		return resp, fmt.Errorf("stream: encode event: %w", err)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		return resp, fmt.Errorf("stream: decode event: %w", err)
	}
	return s.p.opts.Handler(ctx, ev)
}

// toEvent converts a DynamoDB Streams record to the record of a Lambda
// event, as the event source mapping does.
func toEvent(r streamtypes.Record, streamARN, region string) (events.DynamoDBEventRecord, error) {
	rec := events.DynamoDBEventRecord{
		AWSRegion:      aws.ToString(r.AwsRegion),
		EventID:        aws.ToString(r.EventID),
		EventName:      string(r.EventName),
		EventSource:    aws.ToString(r.EventSource),
		EventVersion:   aws.ToString(r.EventVersion),
		EventSourceArn: streamARN,
	}
	if rec.AWSRegion == "" {
		rec.AWSRegion = region
	}
	if rec.EventSource == "" {
		rec.EventSource = eventSource
	}
	if rec.EventVersion == "" {
		rec.EventVersion = eventVersion
	}
	if id := r.UserIdentity; id != nil {
		rec.UserIdentity = &events.DynamoDBUserIdentity{Type: aws.ToString(id.Type), PrincipalID: aws.ToString(id.PrincipalId)}
	}
	d := r.Dynamodb
	if d == nil {
		return rec, nil
	}
	rec.Change = events.DynamoDBStreamRecord{
		ApproximateCreationDateTime: events.SecondsEpochTime{Time: aws.ToTime(d.ApproximateCreationDateTime)},
		SequenceNumber:              aws.ToString(d.SequenceNumber),
		SizeBytes:                   aws.ToInt64(d.SizeBytes),
		StreamViewType:              string(d.StreamViewType),
	}
	var err error
	if rec.Change.Keys, err = fromStreams(d.Keys); err != nil {
		return rec, fmt.Errorf("stream: record %s keys: %w", rec.Change.SequenceNumber, err)
	}
	if rec.Change.NewImage, err = fromStreams(d.NewImage); err != nil {
		return rec, fmt.Errorf("stream: record %s new image: %w", rec.Change.SequenceNumber, err)
	}
	if rec.Change.OldImage, err = fromStreams(d.OldImage); err != nil {
		return rec, fmt.Errorf("stream: record %s old image: %w", rec.Change.SequenceNumber, err)
	}
	return rec, nil
}

func isExpired(err error) bool {
	var e *streamtypes.ExpiredIteratorException
	return errors.As(err, &e)
}

func isTrimmed(err error) bool {
	var e *streamtypes.TrimmedDataAccessException
	return errors.As(err, &e)
}

func isNotFound(err error) bool {
	var e *streamtypes.ResourceNotFoundException
	return errors.As(err, &e)
}
