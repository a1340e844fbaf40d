package devstack

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/dynamoclient/streamsclient"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/receipts"
	"github.com/oncehq/once/internal/reconciler"
	"github.com/oncehq/once/internal/samtemplate"
	"github.com/oncehq/once/internal/stream"
	"github.com/oncehq/once/internal/sweeper"
	"github.com/oncehq/once/internal/worker"
)

// streamFunctions builds the handler of each stream-triggered function of
// the template, exactly as its main does.
var streamFunctions = map[string]queue.Builder[stream.Handler]{
	"WorkerFunction":     worker.Handler,
	"SweeperFunction":    sweeper.Handler,
	"ReconcilerFunction": dynamoOnly(reconciler.Handler),
	"ReceiptsFunction":   receipts.Handler,
}

// dynamoOnly adapts the builder of a stream function that uses no queue
// (its main is app.StartStream).
func dynamoOnly(build func(config.Config, *dynamodb.Client, app.Options) (stream.Handler, error)) queue.Builder[stream.Handler] {
	return func(_ context.Context, cfg config.Config, c queue.Clients, opts app.Options) (stream.Handler, error) {
		return build(cfg, c.DynamoDB, opts)
	}
}

// mapping is one DynamoDB event source of the template, emulated by a
// stream.Poller.
type mapping struct {
	function   string // logical ID of the function
	event      string // the event's name in Events
	table      string // logical ID of the table whose stream it reads
	batchSize  int
	maxRetries int
	bisect     bool
	startAt    string
	filters    []*samtemplate.Pattern
}

// mappingsFromTemplate reads the DynamoDB events of the template's
// functions.
func mappingsFromTemplate(tmpl *samtemplate.Template) ([]mapping, error) {
	vars := tmpl.ParameterDefaults()
	var out []mapping
	for id, fn := range tmpl.Functions() {
		for _, ev := range fn.Events() {
			if ev.Type != "DynamoDB" {
				continue
			}
			m := mapping{function: id, event: ev.Name, batchSize: stream.DefaultBatchSize, maxRetries: stream.DefaultMaxRetryAttempts}
			where := id + " " + ev.Name
			for _, r := range samtemplate.Refs(ev.Properties["Stream"]) {
				if r.Attribute == "StreamArn" {
					m.table = r.Name
				}
			}
			if m.table == "" {
				return nil, fmt.Errorf("devstack: %s: Stream is not !GetAtt <Table>.StreamArn", where)
			}
			num := func(key string, into *int) error {
				v, ok := ev.Properties[key]
				if !ok {
					return nil
				}
				s, err := samtemplate.String(v, vars)
				if err != nil {
					return fmt.Errorf("devstack: %s %s: %w", where, key, err)
				}
				n, err := strconv.Atoi(s)
				if err != nil {
					return fmt.Errorf("devstack: %s %s %q: not a number", where, key, s)
				}
				*into = n
				return nil
			}
			if err := errors.Join(num("BatchSize", &m.batchSize), num("MaximumRetryAttempts", &m.maxRetries)); err != nil {
				return nil, err
			}
			m.bisect, _ = ev.Properties["BisectBatchOnFunctionError"].(bool)
			m.startAt, _ = ev.Properties["StartingPosition"].(string)
			patterns, err := ev.FilterPatterns()
			if err != nil {
				return nil, fmt.Errorf("devstack: %w", err)
			}
			for _, p := range patterns {
				c, err := samtemplate.CompilePattern([]byte(p))
				if err != nil {
					return nil, fmt.Errorf("devstack: %s filter: %w", where, err)
				}
				m.filters = append(m.filters, c)
			}
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].function+out[i].event < out[j].function+out[j].event })
	return out, nil
}

// filter is the mapping's FilterCriteria as a Poller filter: a record passes
// when it matches any pattern, or when there are none.
func (m mapping) filter() func(events.DynamoDBEventRecord) bool {
	if len(m.filters) == 0 {
		return nil
	}
	fields := samtemplate.FieldsOf(m.filters)
	return func(rec events.DynamoDBEventRecord) bool {
		doc, err := recordDocument(rec, fields)
		if err != nil {
			return true // let the handler see (and fail on) what cannot be filtered
		}
		return samtemplate.MatchAnyDocument(m.filters, doc)
	}
}

// mappings returns the template's stream mappings that the stack runs, and
// those it leaves off: the mappings of the functions in Options.StreamsOff.
func (s *Stack) mappings() (on, off []mapping, err error) {
	all, err := mappingsFromTemplate(s.tmpl)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range all {
		if slices.Contains(s.opts.StreamsOff, m.function) {
			off = append(off, m)
		} else {
			on = append(on, m)
		}
	}
	return on, off, nil
}

// streamReadTimeout bounds each attempt of the pollers' stream calls. A
// GetRecords of up to stream.MaxBatchSize records with both images, after a
// burst, can take DynamoDB Local (one SQLite thread) more than the 2 s the
// functions allow a call: an attempt cut short is work DynamoDB Local
// still finishes, then redoes for the retry, and the SDK logs a warning
// for the connection it drops.
const streamReadTimeout = 15 * time.Second

// streamsClient is the pollers' DynamoDB Streams client: the functions'
// configuration, with streamReadTimeout per attempt.
func streamsClient(ctx context.Context, endpoint, region string) (*dynamodbstreams.Client, error) {
	cfg, err := dynamoclient.Config(ctx, dynamoclient.Options{Endpoint: endpoint, Region: region, Timeout: streamReadTimeout})
	if err != nil {
		return nil, err
	}
	return streamsclient.New(cfg, endpoint), nil
}

// startStreams runs one Poller per DynamoDB event of the template, invoking
// the functions in process the way Lambda's event source mappings do:
// filtered, batched, with partial batch failures, bisection and bounded
// retries; what would go to the on-failure destination is logged and
// appended to <StateDir>/dlq-<function>.jsonl.
func (s *Stack) startStreams(ctx context.Context) error {
	mappings, off, err := s.mappings()
	if err != nil {
		return err
	}
	for _, m := range off {
		s.log.Info("devstack: stream mapping off", "function", m.function)
	}
	streams, err := streamsClient(ctx, s.cfg.DynamoDBEndpoint, s.cfg.Region)
	if err != nil {
		return err
	}
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	stop := func(context.Context) error {
		cancel()
		wg.Wait()
		return nil
	}
	for _, m := range mappings {
		build, ok := streamFunctions[m.function]
		if !ok {
			return errors.Join(fmt.Errorf("devstack: no handler for %s, triggered by %s's stream", m.function, m.table), stop(ctx))
		}
		if s.tmpl.Resources()[m.table].Type != "AWS::DynamoDB::Table" {
			return errors.Join(fmt.Errorf("devstack: %s reads the stream of unknown table %s", m.function, m.table), stop(ctx))
		}
		table := s.cfg.Table(m.table)
		log := s.log.With("function", samtemplate.FunctionFolder(m.function))
		h, err := build(ctx, s.cfg, s.clients, app.Options{Logger: log, Metrics: s.output})
		if err != nil {
			return errors.Join(fmt.Errorf("devstack: %s: %w", m.function, err), stop(ctx))
		}
		p, err := stream.NewPoller(stream.PollerOptions{
			Client:           streams,
			DB:               s.client,
			Table:            table,
			Name:             samtemplate.FunctionFolder(m.function),
			Handler:          h,
			BatchSize:        m.batchSize,
			MaxRetryAttempts: m.maxRetries,
			BisectOnError:    m.bisect,
			Filter:           m.filter(),
			DeadLetterFile:   filepath.Join(s.stateDir, "dlq-"+samtemplate.FunctionFolder(m.function)+".jsonl"),
			// TRIM_HORIZON, as the template says: a restarted stack also
			// finishes what an earlier run left (the handlers are idempotent).
			StartAt: streamtypes.ShardIteratorType(m.startAt),
			Logger:  s.log.With("component", "stream"),
		})
		if err != nil {
			return errors.Join(fmt.Errorf("devstack: %s: %w", m.function, err), stop(ctx))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Run(life); err != nil {
				s.fail(fmt.Errorf("devstack: stream of %s for %s: %w", table, m.function, err))
			}
		}()
		s.log.Info("devstack: stream mapping", "function", m.function, "table", table,
			"batch_size", m.batchSize, "max_retries", m.maxRetries, "filters", len(m.filters))
	}
	s.onStop("stream mappings", stop)
	return nil
}
