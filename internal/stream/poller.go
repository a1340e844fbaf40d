package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	pubstream "github.com/oncehq/once/idempotency/stream"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// StreamsAPI is the part of the DynamoDB Streams client the Poller uses;
// *dynamodbstreams.Client implements it.
type StreamsAPI interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// TableAPI is the part of the DynamoDB client the Poller uses to find the
// table's stream; *dynamodb.Client implements it.
type TableAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Handler is a stream-triggered Lambda handler, as lambda.Start takes it.
type Handler = pubstream.Handler

// Defaults of PollerOptions, those of a Lambda event source mapping where
// Lambda has one.
const (
	DefaultBatchSize        = 100
	DefaultPollInterval     = 250 * time.Millisecond
	DefaultMaxIdleInterval  = 2 * time.Second
	DefaultMaxRetryAttempts = 3
	DefaultRetryBackoff     = 100 * time.Millisecond

	// MaxBatchSize is the most records one GetRecords call returns (the
	// Poller asks for as many), and the largest batch it delivers.
	MaxBatchSize = 1000
)

const (
	maxBackoffFactor = 32 // a backoff never exceeds 32 x RetryBackoff
	discoverInterval = time.Second
	eventSource      = "aws:dynamodb"
	eventVersion     = "1.1"
)

// PollerOptions configures a Poller, like the properties of an event source
// mapping.
type PollerOptions struct {
	// Client reads the stream. Required.
	Client StreamsAPI
	// DB finds the table's latest stream (DescribeTable). Required.
	DB TableAPI
	// Table is the table whose latest stream is read. Required.
	Table string
	// Name identifies the mapping (the function it triggers) in logs and
	// dead letters; default Table.
	Name string
	// Handler is invoked with each batch. Required.
	Handler Handler
	// BatchSize is the most records per invocation (default 100, at most
	// MaxBatchSize).
	BatchSize int
	// PollInterval is the pause after a read of a shard that returned fewer
	// than MaxBatchSize records (default 250ms: Lambda polls a shard about
	// four times a second). A full read is followed at once by the next.
	PollInterval time.Duration
	// MaxIdleInterval bounds the pause after reads that found nothing for
	// the handler (no record, or none that the Filter passes): it doubles
	// from PollInterval with each such read, up to MaxIdleInterval (default
	// 2s), and falls back to PollInterval as soon as a read delivers
	// records. An idle local poller need not cost DynamoDB Local a
	// GetRecords four times a second (each reads, converts and filters
	// every record of the shard since the last); AWS pays for none of them.
	// A read that returns MaxBatchSize records is followed at once by the
	// next, delivered or not.
	MaxIdleInterval time.Duration
	// MaxRetryAttempts is how many times a failing batch is retried before
	// its records go to the dead letter (default 3). Lambda's -1 (retry
	// until the record expires) is not supported: negative values are
	// rejected.
	MaxRetryAttempts int
	// BisectOnError splits a batch whose invocation failed in two before
	// retrying, as BisectBatchOnFunctionError does (see the package
	// documentation). The zero value is false, as in Lambda; the project's
	// mappings set BisectBatchOnFunctionError, so the devstack should set
	// this too.
	BisectOnError bool
	// RetryBackoff is the pause before the first retry; it doubles with
	// each attempt, up to 32 times its value (default 100ms).
	RetryBackoff time.Duration
	// DeadLetter, when set, receives every record discarded after its
	// retries, one call per record.
	DeadLetter func(ctx context.Context, f Failure)
	// DeadLetterFile, when set, is a file (conventionally
	// .devstack/dlq-<name>.jsonl) to which every discarded record is
	// appended as a JSON line. Its directory is created if need be.
	// Discarded records are logged in every case.
	DeadLetterFile string
	// Filter, when set, decides which records reach the handler, as an event
	// source mapping's FilterCriteria do: a record for which it returns false
	// is dropped before batching and never delivered, retried or
	// dead-lettered. Nil delivers every record.
	Filter func(events.DynamoDBEventRecord) bool
	// StartAt is TRIM_HORIZON (the default) or LATEST. It applies to the
	// shards present when Run starts; shards that appear later are read from
	// their start, as Lambda does.
	StartAt streamtypes.ShardIteratorType
	// Logger receives the poller's logs (default slog.Default()).
	Logger *slog.Logger
}

// Poller is a local event source mapping: it polls the stream of one table
// and invokes a handler in process (see the package documentation for the
// semantics).
type Poller struct {
	opts PollerOptions
	log  *slog.Logger
	dlq  sync.Mutex // serialises appends to DeadLetterFile
}

// NewPoller validates opts, applies the defaults and returns a Poller.
func NewPoller(opts PollerOptions) (*Poller, error) {
	var errs []error
	if opts.Client == nil {
		errs = append(errs, errors.New("missing Client"))
	}
	if opts.DB == nil {
		errs = append(errs, errors.New("missing DB"))
	}
	if opts.Table == "" {
		errs = append(errs, errors.New("missing Table"))
	}
	if opts.Handler == nil {
		errs = append(errs, errors.New("missing Handler"))
	}
	if opts.BatchSize < 0 || opts.BatchSize > MaxBatchSize {
		errs = append(errs, fmt.Errorf("BatchSize %d out of range 1-%d", opts.BatchSize, MaxBatchSize))
	}
	if opts.PollInterval < 0 || opts.RetryBackoff < 0 || opts.MaxIdleInterval < 0 {
		errs = append(errs, errors.New("PollInterval, MaxIdleInterval and RetryBackoff must not be negative"))
	}
	if opts.MaxRetryAttempts < 0 {
		errs = append(errs, fmt.Errorf("MaxRetryAttempts %d is negative (retrying forever is not supported)", opts.MaxRetryAttempts))
	}
	switch opts.StartAt {
	case "":
		opts.StartAt = streamtypes.ShardIteratorTypeTrimHorizon
	case streamtypes.ShardIteratorTypeTrimHorizon, streamtypes.ShardIteratorTypeLatest:
	default:
		errs = append(errs, fmt.Errorf("StartAt %q is neither TRIM_HORIZON nor LATEST", opts.StartAt))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("stream: poller options: %w", err)
	}
	if opts.Name == "" {
		opts.Name = opts.Table
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.MaxIdleInterval == 0 {
		opts.MaxIdleInterval = DefaultMaxIdleInterval
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.MaxRetryAttempts == 0 {
		opts.MaxRetryAttempts = DefaultMaxRetryAttempts
	}
	if opts.RetryBackoff == 0 {
		opts.RetryBackoff = DefaultRetryBackoff
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("poller", opts.Name, "table", opts.Table)
	return &Poller{opts: opts, log: log}, nil
}

// keep reports whether rec passes the Filter.
func (p *Poller) keep(rec events.DynamoDBEventRecord) bool {
	return p.opts.Filter == nil || p.opts.Filter(rec)
}

// Run polls the table's latest stream until ctx is done, then waits for the
// batches in flight and returns nil. It returns an error only when the table
// cannot be described or has no stream; errors while polling are logged and
// retried with a bounded backoff.
func (p *Poller) Run(ctx context.Context) error {
	arn, err := p.streamARN(ctx)
	if err != nil {
		return err
	}
	p.log.Info("stream poller started", "stream_arn", arn, "start_at", string(p.opts.StartAt))

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		finished = map[string]bool{} // shards read to their end; guarded by mu
		wake     = make(chan struct{}, 1)
		started  = map[string]bool{}
		initial  map[string]bool // shards listed at start, for StartAt LATEST
		fails    int
	)
	defer wg.Wait()
	ticker := time.NewTicker(discoverInterval)
	defer ticker.Stop()
	for ctx.Err() == nil {
		shards, err := p.describe(ctx, arn)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fails++
			p.log.Warn("describe stream failed", "err", err, "attempt", fails)
			sleep(ctx, p.backoff(fails))
			continue
		}
		fails = 0
		if initial == nil {
			initial = map[string]bool{}
			for _, s := range shards {
				initial[aws.ToString(s.ShardId)] = true
			}
		}
		for {
			mu.Lock()
			ready := readyShards(shards, started, finished)
			mu.Unlock()
			if len(ready) == 0 {
				break
			}
			for _, s := range ready {
				id := aws.ToString(s.ShardId)
				started[id] = true
				start := streamtypes.ShardIteratorTypeTrimHorizon
				if p.opts.StartAt == streamtypes.ShardIteratorTypeLatest && initial[id] {
					if s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil {
						// Closed before we started: nothing in it is "latest".
						mu.Lock()
						finished[id] = true
						mu.Unlock()
						continue
					}
					start = streamtypes.ShardIteratorTypeLatest
				}
				r := &shardReader{
					p:         p,
					streamARN: arn,
					region:    arnRegion(arn),
					shardID:   id,
					start:     start,
					log:       p.log.With("shard", id),
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r.run(ctx) {
						mu.Lock()
						finished[id] = true
						mu.Unlock()
						select {
						case wake <- struct{}{}:
						default:
						}
					}
				}()
			}
		}
		select {
		case <-ctx.Done():
		case <-ticker.C:
		case <-wake:
		}
	}
	p.log.Info("stream poller stopping")
	return nil
}

// streamARN returns the table's latest stream ARN.
func (p *Poller) streamARN(ctx context.Context) (string, error) {
	out, err := p.opts.DB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(p.opts.Table)})
	if err != nil {
		return "", fmt.Errorf("stream: describe table %s: %w", p.opts.Table, err)
	}
	if out.Table == nil || aws.ToString(out.Table.LatestStreamArn) == "" {
		return "", fmt.Errorf("stream: table %s has no stream", p.opts.Table)
	}
	return aws.ToString(out.Table.LatestStreamArn), nil
}

// describe lists every shard of the stream.
func (p *Poller) describe(ctx context.Context, arn string) ([]streamtypes.Shard, error) {
	var (
		shards []streamtypes.Shard
		after  *string
	)
	// Each page holds at least one shard, and a stream has far fewer than
	// 10000 pages' worth; the bound guards against an emulator that repeats.
	for range 10000 {
		out, err := p.opts.Client.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{
			StreamArn:             aws.String(arn),
			ExclusiveStartShardId: after,
		})
		if err != nil {
			return nil, fmt.Errorf("stream: describe stream: %w", err)
		}
		if out.StreamDescription == nil {
			return shards, nil
		}
		shards = append(shards, out.StreamDescription.Shards...)
		next := out.StreamDescription.LastEvaluatedShardId
		if next == nil || aws.ToString(next) == aws.ToString(after) {
			return shards, nil
		}
		after = next
	}
	return shards, nil
}

// readyShards returns the shards not yet started whose parent has been read
// to its end, has expired from the stream, or never existed: reading a child
// only after its parent keeps every item's changes in order.
func readyShards(shards []streamtypes.Shard, started, finished map[string]bool) []streamtypes.Shard {
	listed := make(map[string]bool, len(shards))
	for _, s := range shards {
		listed[aws.ToString(s.ShardId)] = true
	}
	var ready []streamtypes.Shard
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		if started[id] {
			continue
		}
		parent := aws.ToString(s.ParentShardId)
		if parent == "" || finished[parent] || (!listed[parent] && !started[parent]) {
			ready = append(ready, s)
		}
	}
	return ready
}

// backoff is the pause before retry number attempt (from 1), bounded.
func (p *Poller) backoff(attempt int) time.Duration {
	d := p.opts.RetryBackoff
	for i := 1; i < attempt && d < maxBackoffFactor*p.opts.RetryBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoffFactor*p.opts.RetryBackoff)
}

// sleep pauses for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// arnRegion returns the region field of an ARN.
func arnRegion(arn string) string {
	parts := strings.SplitN(arn, ":", 5)
	if len(parts) < 5 {
		return ""
	}
	return parts[3]
}
