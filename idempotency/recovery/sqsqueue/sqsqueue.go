package sqsqueue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncehq/once/idempotency/internal/nilness"
	"github.com/oncehq/once/internal/sqsclient"
)

// MaxDelay is SQS's limit on a message's DelaySeconds, 15 minutes; it is
// recovery.MaxDelay.
const MaxDelay = 15 * time.Minute

// API is the part of the SQS client a Queue uses; *sqs.Client implements
// it.
type API interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Queue sends messages to one SQS standard queue, each delivered after its
// own delay. It implements recovery.Queue and is safe for concurrent use.
type Queue struct {
	api API
	url string
}

// New returns the queue at queueURL (what CloudFormation's !Ref of an
// AWS::SQS::Queue gives), reached through api. A nil api, or one holding a
// nil pointer (a nil *sqs.Client, such as NewClient returns with an error),
// or a queueURL that is not an absolute http(s) URL (an environment variable not
// set, a queue name) is an error, at start-up rather than at the first send.
func New(api API, queueURL string) (*Queue, error) {
	var errs []error
	if nilness.Nil(api) {
		errs = append(errs, errors.New("sqsqueue: the SQS client is nil"))
	}
	if u, err := url.Parse(queueURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("sqsqueue: queue URL %q is not an absolute http(s) URL (the queue's URL, as !Ref of the queue gives it)", queueURL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Queue{api: api, url: queueURL}, nil
}

// URL is the queue's URL.
func (q *Queue) URL() string { return q.url }

// Send sends body, to be delivered no earlier than delay from now: SQS's
// DelaySeconds, delay rounded up to whole seconds and capped at MaxDelay (a
// negative delay is none). A message sent with a longer delay arrives after
// MaxDelay, early; see the package documentation. An error means the
// message may not have been sent.
func (q *Queue) Send(ctx context.Context, body string, delay time.Duration) error {
	_, err := q.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:     aws.String(q.url),
		MessageBody:  aws.String(body),
		DelaySeconds: DelaySeconds(delay),
	})
	if err != nil {
		return fmt.Errorf("sqsqueue: send: %w", err)
	}
	return nil
}

// DelaySeconds is delay as SQS takes it: whole seconds, rounded up, from 0
// to 900.
func DelaySeconds(delay time.Duration) int32 {
	return int32(math.Ceil(min(max(delay, 0), MaxDelay).Seconds()))
}

// NewClient returns an SQS client configured from the environment as the AWS
// SDK does (AWS_REGION, the function's role), with bounded retries (3
// attempts), a 5s timeout per attempt, and the SDK's own log lines (rare
// warnings) written as structured lines: to slog's default logger when the
// program has set one, else as JSON on stderr. SQS_ENDPOINT, when set, points
// it at a local SQS (LocalStack, ElasticMQ) with dummy credentials (and
// us-east-1 without AWS_REGION, at a loopback address, localhost, localstack
// or host.docker.internal), or at an AWS endpoint (a VPC endpoint) with the
// usual ones and the environment's region. An SQS_ENDPOINT that is not an
// absolute http(s) URL, or no region at all, is an error naming the
// variables.
func NewClient(ctx context.Context) (*sqs.Client, error) {
	endpoint, region := os.Getenv("SQS_ENDPOINT"), os.Getenv("AWS_REGION")
	c, err := sqsclient.New(ctx, endpoint, region, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("sqsqueue: SQS client (SQS_ENDPOINT=%q, AWS_REGION=%q): %w", endpoint, region, err)
	}
	return c, nil
}
