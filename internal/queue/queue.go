package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
)

// MaxDelay is SQS's limit on a message's DelaySeconds.
const MaxDelay = 15 * time.Minute

// SendAPI is the part of the SQS client a Queue uses; *sqs.Client
// implements it.
type SendAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// URLAPI is the part of the SQS client Resolve uses; *sqs.Client implements
// it.
type URLAPI interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// Queue sends messages to one SQS queue. It is safe for concurrent use.
type Queue struct {
	api SendAPI
	url string
}

// New returns the queue at url, reached through api.
func New(api SendAPI, url string) *Queue {
	return &Queue{api: api, url: url}
}

// URL is the queue's URL.
func (q *Queue) URL() string { return q.url }

// Send sends body, to be delivered no earlier than delay from now: SQS's
// DelaySeconds, delay rounded up to whole seconds and capped at MaxDelay.
func (q *Queue) Send(ctx context.Context, body string, delay time.Duration) error {
	_, err := q.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:     aws.String(q.url),
		MessageBody:  aws.String(body),
		DelaySeconds: DelaySeconds(delay),
	})
	if err != nil {
		return fmt.Errorf("queue: send: %w", err)
	}
	return nil
}

// DelaySeconds is delay as SQS takes it: whole seconds, rounded up, from 0
// to 900.
func DelaySeconds(delay time.Duration) int32 {
	s := math.Ceil(min(max(delay, 0), MaxDelay).Seconds())
	return int32(s)
}

// IsURL reports whether v is a queue URL rather than a queue name.
func IsURL(v string) bool {
	u, err := url.Parse(v)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// Resolve returns the URL of the queue v names: v itself when it is a URL
// (template.yaml passes URLs), else the URL GetQueueUrl returns for the name
// (the devstack's and the CLI's defaults are names).
func Resolve(ctx context.Context, api URLAPI, v string) (string, error) {
	if IsURL(v) {
		return v, nil
	}
	out, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(v)})
	var missing *types.QueueDoesNotExist
	switch {
	case errors.As(err, &missing):
		return "", fmt.Errorf("queue: %s does not exist: %w", v, err)
	case err != nil:
		return "", fmt.Errorf("queue: resolve %s: %w", v, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// Name returns the queue name of a queue name or URL (its last path
// segment).
func Name(v string) string {
	return v[strings.LastIndexByte(v, '/')+1:]
}

// ClientOptions bound an SQS client's calls.
type ClientOptions struct {
	// Timeout bounds each HTTP attempt (default 5s). A client that long
	// polls needs more than the poll's WaitTimeSeconds.
	Timeout time.Duration
}

// Client returns the SQS client for cfg: cfg.SQSEndpoint when set (the
// devstack's endpoint, LocalStack), else AWS; bounded retries, as the
// DynamoDB client's.
func Client(ctx context.Context, cfg config.Config, opts ClientOptions) (*sqs.Client, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	awsCfg, err := dynamoclient.Config(ctx, dynamoclient.Options{
		Endpoint: cfg.SQSEndpoint, Region: cfg.Region, Timeout: opts.Timeout, MaxBackoff: time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	return sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if cfg.SQSEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.SQSEndpoint)
		}
	}), nil
}
