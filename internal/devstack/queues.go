package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/checker"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/receipts"
	"github.com/oncehq/once/internal/samtemplate"
	"github.com/oncehq/once/internal/sqslocal"
	"github.com/oncehq/once/internal/sqsmapping"
	"github.com/oncehq/once/internal/worker"
)

// queueFunctions builds the handler of each SQS-triggered function of the
// template, exactly as its main does.
var queueFunctions = map[string]queue.Builder[queue.Handler]{
	"CheckerFunction":  checker.Handler,
	"RetrierFunction":  worker.RetryHandler,
	"ResenderFunction": receipts.RetryHandler,
}

// maxLocalConcurrency caps a mapping's pollers locally, whatever its
// ScalingConfig allows in AWS.
const maxLocalConcurrency = 4

// queueNames maps the template's queues that the functions use to the
// names (or URLs) cfg gives them. The stream mappings' on-failure queues
// are files locally (see startStreams).
func queueNames(cfg config.Config) map[string]string {
	return map[string]string{
		"CheckQueue":       cfg.CheckQueue,
		"CheckDLQ":         cfg.CheckDLQ,
		"WorkerRetryQueue": cfg.WorkerRetryQueue,
		"WorkerRetryDLQ":   cfg.WorkerRetryDLQ,
		// The receipts' retries.
		"ReceiptRetryQueue": cfg.ReceiptRetryQueue,
		"ReceiptRetryDLQ":   cfg.ReceiptRetryDLQ,
	}
}

// startQueues serves the local SQS endpoint on 127.0.0.1:SQS_PORT, unless
// SQS_ENDPOINT names one (LocalStack), builds the SQS client, and creates the
// template's queues under cfg's names, dead-letter queues first, with their
// attributes and redrive policies. An existing queue with the same
// attributes is kept.
func (s *Stack) startQueues(ctx context.Context) error {
	if s.cfg.SQSEndpoint == "" {
		port := DefaultSQSPort
		if v := strings.TrimSpace(s.opts.Getenv(EnvSQSPort)); v != "" {
			p, err := strconv.Atoi(v)
			if err != nil || p < 0 || p > 65535 {
				return fmt.Errorf("devstack: %s=%q: not a port number (0-65535)", EnvSQSPort, v)
			}
			port = p
		}
		srv, url, err := s.serve("sqs", port, sqslocal.New(sqslocal.Options{Region: s.cfg.Region, Logger: s.log.With("component", "sqs")}), nil)
		if err != nil {
			return err
		}
		s.onStop("sqs endpoint", func(context.Context) error { return srv.Close() })
		s.cfg.SQSEndpoint = url
	}
	client, err := queue.Client(ctx, s.cfg, queue.ClientOptions{})
	if err != nil {
		return err
	}
	s.clients = queue.Clients{DynamoDB: s.client, SQS: client}
	queues, err := s.tmpl.Queues()
	if err != nil {
		return err
	}
	names := queueNames(s.cfg)
	arns := map[string]string{}
	for _, q := range queues {
		v, ok := names[q.LogicalID]
		if !ok {
			continue
		}
		delete(names, q.LogicalID)
		url, err := s.createQueue(ctx, q, v, arns)
		if err != nil {
			return err
		}
		out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			return fmt.Errorf("devstack: queue %s: %w", q.LogicalID, err)
		}
		arns[q.LogicalID] = out.Attributes["QueueArn"]
	}
	if len(names) > 0 {
		missing := make([]string, 0, len(names))
		for id := range names {
			missing = append(missing, id)
		}
		sort.Strings(missing)
		return fmt.Errorf("devstack: template defines no queue %s", strings.Join(missing, ", "))
	}
	s.log.Info("devstack: queues ready", "sqs", s.cfg.SQSEndpoint, "queues", slices.Sorted(maps.Values(queueNames(s.cfg))))
	return nil
}

// createQueue creates q as v names it (a URL names a queue that exists
// already) and returns its URL; arns holds the ARNs of the queues made so
// far, for its redrive policy.
func (s *Stack) createQueue(ctx context.Context, q samtemplate.Queue, v string, arns map[string]string) (string, error) {
	if queue.IsURL(v) {
		return v, nil
	}
	attrs := map[string]string{}
	for k, val := range q.Attributes {
		attrs[k] = val
	}
	if q.DeadLetter != "" {
		arn, ok := arns[q.DeadLetter]
		if !ok {
			return "", fmt.Errorf("devstack: queue %s: its dead-letter queue %s has no name here", q.LogicalID, q.DeadLetter)
		}
		b, _ := json.Marshal(map[string]any{"deadLetterTargetArn": arn, "maxReceiveCount": q.MaxReceiveCount})
		attrs["RedrivePolicy"] = string(b)
	}
	out, err := s.clients.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(v), Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("devstack: create queue %s (%s): %w", v, q.LogicalID, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// queueMapping is one SQS event source of the template, emulated by an
// sqsmapping.Poller.
type queueMapping struct {
	function    string // logical ID of the function
	queue       string // logical ID of the queue it reads
	batchSize   int
	concurrency int
	report      bool // FunctionResponseTypes: [ReportBatchItemFailures]
	timeout     time.Duration
}

// queueMappingsFromTemplate reads the SQS events of the template's
// functions.
func queueMappingsFromTemplate(tmpl *samtemplate.Template) ([]queueMapping, error) {
	vars := tmpl.ParameterDefaults()
	var out []queueMapping
	for id, fn := range tmpl.Functions() {
		for _, ev := range fn.Events() {
			if ev.Type != "SQS" {
				continue
			}
			where := id + " " + ev.Name
			m := queueMapping{function: id, batchSize: sqsmapping.DefaultBatchSize, concurrency: sqsmapping.DefaultConcurrency, timeout: sqsmapping.DefaultTimeout}
			for _, r := range samtemplate.Refs(ev.Properties["Queue"]) {
				if r.Attribute == "Arn" {
					m.queue = r.Name
				}
			}
			if m.queue == "" {
				return nil, fmt.Errorf("devstack: %s: Queue is not !GetAtt <Queue>.Arn", where)
			}
			num := func(v any, into *int) error {
				if v == nil {
					return nil
				}
				str, err := samtemplate.String(v, vars)
				if err != nil {
					return fmt.Errorf("devstack: %s: %w", where, err)
				}
				n, err := strconv.Atoi(str)
				if err != nil {
					return fmt.Errorf("devstack: %s: %q is not a number", where, str)
				}
				*into = n
				return nil
			}
			var timeout int
			scaling, _ := ev.Properties["ScalingConfig"].(map[string]any)
			if err := errors.Join(
				num(ev.Properties["BatchSize"], &m.batchSize),
				num(scaling["MaximumConcurrency"], &m.concurrency),
				num(fn.Properties["Timeout"], &timeout),
			); err != nil {
				return nil, err
			}
			m.concurrency = min(m.concurrency, maxLocalConcurrency)
			if timeout > 0 {
				m.timeout = time.Duration(timeout) * time.Second
			}
			types, _ := ev.Properties["FunctionResponseTypes"].([]any)
			m.report = slices.Contains(types, any("ReportBatchItemFailures"))
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].function < out[j].function })
	return out, nil
}

// startQueueMappings runs one sqsmapping.Poller per SQS event of the
// template, invoking the functions in process the way Lambda's event source
// mappings do; the queues' redrive policies move what keeps failing to
// their dead-letter queues.
func (s *Stack) startQueueMappings(ctx context.Context) error {
	mappings, err := queueMappingsFromTemplate(s.tmpl)
	if err != nil {
		return err
	}
	names := queueNames(s.cfg)
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	stop := func(context.Context) error {
		cancel()
		wg.Wait()
		return nil
	}
	for _, m := range mappings {
		build, ok := queueFunctions[m.function]
		if !ok {
			return errors.Join(fmt.Errorf("devstack: no handler for %s, triggered by %s", m.function, m.queue), stop(ctx))
		}
		name, ok := names[m.queue]
		if !ok {
			return errors.Join(fmt.Errorf("devstack: %s reads unknown queue %s", m.function, m.queue), stop(ctx))
		}
		url, err := queue.Resolve(ctx, s.clients.SQS, name)
		if err != nil {
			return errors.Join(fmt.Errorf("devstack: %s: %w", m.function, err), stop(ctx))
		}
		folder := samtemplate.FunctionFolder(m.function)
		h, err := build(ctx, s.cfg, s.clients, app.Options{Logger: s.log.With("function", folder), Metrics: s.output})
		if err != nil {
			return errors.Join(fmt.Errorf("devstack: %s: %w", m.function, err), stop(ctx))
		}
		p, err := sqsmapping.New(sqsmapping.Options{
			Client:                  s.clients.SQS,
			QueueURL:                url,
			Name:                    folder,
			Handler:                 h,
			BatchSize:               m.batchSize,
			ReportBatchItemFailures: m.report,
			Concurrency:             m.concurrency,
			Timeout:                 m.timeout,
			Region:                  s.cfg.Region,
			Logger:                  s.log.With("component", "sqs-mapping"),
		})
		if err != nil {
			return errors.Join(fmt.Errorf("devstack: %s: %w", m.function, err), stop(ctx))
		}
		wg.Go(func() {
			if err := p.Run(life); err != nil {
				s.fail(fmt.Errorf("devstack: queue %s for %s: %w", name, m.function, err))
			}
		})
		s.log.Info("devstack: queue mapping", "function", m.function, "queue", name,
			"batch_size", m.batchSize, "concurrency", m.concurrency, "report_batch_item_failures", m.report)
	}
	s.onStop("queue mappings", stop)
	return nil
}
