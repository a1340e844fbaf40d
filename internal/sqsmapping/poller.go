package sqsmapping

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// API is the part of the SQS client a Poller uses; *sqs.Client implements
// it.
type API interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// Handler is an SQS-triggered Lambda handler, as lambda.Start takes it.
type Handler = func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// Defaults of Options.
const (
	DefaultBatchSize   = 10
	DefaultConcurrency = 2
	DefaultWaitTime    = 2 * time.Second
	DefaultTimeout     = 10 * time.Second
	// MaxBatchSize is the most messages one ReceiveMessage returns, and so
	// the largest batch the Poller delivers (Lambda delivers more only with
	// a batching window).
	MaxBatchSize = 10
	// errorBackoff is the pause after a failed receive.
	errorBackoff = 500 * time.Millisecond
)

// Options configures a Poller, like the properties of an SQS event source
// mapping.
type Options struct {
	// Client reaches the queue. Required.
	Client API
	// QueueURL is the queue the mapping reads. Required.
	QueueURL string
	// Name identifies the mapping (the function it triggers) in logs;
	// default the queue's name.
	Name string
	// Handler is invoked with each batch. Required.
	Handler Handler
	// BatchSize is the most messages per invocation (default 10, at most
	// MaxBatchSize).
	BatchSize int
	// ReportBatchItemFailures honours the handler's batch item failures
	// (FunctionResponseTypes: [ReportBatchItemFailures]); without it any
	// successful invocation deletes its whole batch.
	ReportBatchItemFailures bool
	// Concurrency is how many batches are in flight at once (Lambda's
	// pollers; default 2).
	Concurrency int
	// WaitTime is each receive's long poll (default 2s; Lambda's is 20s).
	WaitTime time.Duration
	// Timeout bounds one invocation, as the function's Timeout does
	// (default 10s).
	Timeout time.Duration
	// Region fills the records' awsRegion (default: the ARN's region).
	Region string
	// Logger receives the poller's logs (default slog.Default()).
	Logger *slog.Logger
}

// Poller is a local SQS event source mapping (see the package
// documentation).
type Poller struct {
	opts Options
	log  *slog.Logger
}

// New validates opts, applies the defaults and returns a Poller.
func New(opts Options) (*Poller, error) {
	var errs []error
	if opts.Client == nil {
		errs = append(errs, errors.New("missing Client"))
	}
	if opts.QueueURL == "" {
		errs = append(errs, errors.New("missing QueueURL"))
	}
	if opts.Handler == nil {
		errs = append(errs, errors.New("missing Handler"))
	}
	if opts.BatchSize < 0 || opts.BatchSize > MaxBatchSize {
		errs = append(errs, fmt.Errorf("BatchSize %d out of range 1-%d", opts.BatchSize, MaxBatchSize))
	}
	if opts.Concurrency < 0 || opts.WaitTime < 0 || opts.Timeout < 0 {
		errs = append(errs, errors.New("Concurrency, WaitTime and Timeout must not be negative"))
	}
	if opts.WaitTime > 20*time.Second {
		errs = append(errs, fmt.Errorf("WaitTime %v exceeds SQS's 20s", opts.WaitTime))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sqsmapping: options: %w", err)
	}
	if opts.Name == "" {
		opts.Name = opts.QueueURL[strings.LastIndexByte(opts.QueueURL, '/')+1:]
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.WaitTime == 0 {
		opts.WaitTime = DefaultWaitTime
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Poller{opts: opts, log: log.With("poller", opts.Name, "queue", opts.QueueURL)}, nil
}

// Run polls the queue until ctx is done, then waits for the batches in
// flight and returns nil. It returns an error only when the queue cannot be
// found at start; errors while polling are logged and retried after a pause.
func (p *Poller) Run(ctx context.Context) error {
	out, err := p.opts.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(p.opts.QueueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return fmt.Errorf("sqsmapping: queue %s: %w", p.opts.QueueURL, err)
	}
	arn := out.Attributes[string(types.QueueAttributeNameQueueArn)]
	region := p.opts.Region
	if parts := strings.SplitN(arn, ":", 5); region == "" && len(parts) == 5 {
		region = parts[3]
	}
	p.log.Info("sqs poller started", "queue_arn", arn, "batch_size", p.opts.BatchSize, "concurrency", p.opts.Concurrency)
	var wg sync.WaitGroup
	for range p.opts.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				if !p.poll(ctx, arn, region) {
					sleep(ctx, errorBackoff)
				}
			}
		})
	}
	wg.Wait()
	p.log.Info("sqs poller stopping")
	return nil
}

// poll receives one batch and delivers it; false means the receive failed.
func (p *Poller) poll(ctx context.Context, arn, region string) bool {
	out, err := p.opts.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(p.opts.QueueURL),
		MaxNumberOfMessages:         int32(p.opts.BatchSize),
		WaitTimeSeconds:             int32(p.opts.WaitTime / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("receive failed", "err", err)
		}
		return false
	}
	if len(out.Messages) == 0 {
		return true
	}
	ev := events.SQSEvent{Records: make([]events.SQSMessage, 0, len(out.Messages))}
	for _, m := range out.Messages {
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId:         aws.ToString(m.MessageId),
			ReceiptHandle:     aws.ToString(m.ReceiptHandle),
			Body:              aws.ToString(m.Body),
			Md5OfBody:         aws.ToString(m.MD5OfBody),
			Attributes:        m.Attributes,
			MessageAttributes: map[string]events.SQSMessageAttribute{},
			EventSourceARN:    arn,
			EventSource:       "aws:sqs",
			AWSRegion:         region,
		})
	}
	failed, err := p.invoke(ctx, ev)
	if err != nil {
		// Nothing is deleted: every message comes back after its
		// visibility timeout, and the queue's redrive policy decides when
		// it goes to the dead-letter queue.
		p.log.Warn("invocation failed; the batch will be delivered again", "err", err, "messages", len(ev.Records))
		return true
	}
	p.delete(ctx, ev, failed)
	return true
}

// invoke runs the handler on ev as Lambda would (the event round-tripped
// through JSON, a panic turned into an error, bounded by Timeout) and returns
// the IDs of the messages it failed.
func (p *Poller) invoke(ctx context.Context, ev events.SQSEvent) (failed map[string]bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("handler panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("sqsmapping: handler panicked: %v", v)
		}
	}()
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("sqsmapping: encode event: %w", err)
	}
	var in events.SQSEvent
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("sqsmapping: decode event: %w", err)
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.Timeout)
	defer cancel()
	resp, err := p.opts.Handler(ictx, in)
	if err != nil {
		return nil, err
	}
	failed = map[string]bool{}
	if !p.opts.ReportBatchItemFailures {
		return failed, nil
	}
	ids := map[string]bool{}
	for _, r := range ev.Records {
		ids[r.MessageId] = true
	}
	for _, f := range resp.BatchItemFailures {
		if !ids[f.ItemIdentifier] {
			// Lambda fails the whole batch on an identifier it does not know.
			return nil, fmt.Errorf("sqsmapping: batch item failure %q names no message of the batch", f.ItemIdentifier)
		}
		failed[f.ItemIdentifier] = true
	}
	return failed, nil
}

// delete deletes the batch's messages that did not fail.
func (p *Poller) delete(ctx context.Context, ev events.SQSEvent, failed map[string]bool) {
	var entries []types.DeleteMessageBatchRequestEntry
	for i, r := range ev.Records {
		if failed[r.MessageId] {
			continue
		}
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.ReceiptHandle)})
	}
	if len(failed) > 0 {
		p.log.Info("batch item failures; those messages will be delivered again", "failed", len(failed), "messages", len(ev.Records))
	}
	if len(entries) == 0 {
		return
	}
	// The deletes go through even when the poller is stopping: the
	// handler's work is done.
	out, err := p.opts.Client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{
		QueueUrl: aws.String(p.opts.QueueURL), Entries: entries,
	})
	switch {
	case err != nil:
		p.log.Warn("delete failed; the batch will be delivered again", "err", err)
	case len(out.Failed) > 0:
		p.log.Warn("some deletes failed; those messages will be delivered again", "failed", len(out.Failed))
	}
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
