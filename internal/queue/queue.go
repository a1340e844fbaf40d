package queue

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncehq/once/idempotency/recovery/sqsqueue"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/sqsclient"
)

// MaxDelay is SQS's limit on a message's DelaySeconds.
const MaxDelay = sqsqueue.MaxDelay

// URLAPI is the part of the SQS client Resolve uses; *sqs.Client implements
// it.
type URLAPI interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
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
	c, err := sqsclient.New(ctx, cfg.SQSEndpoint, cfg.Region, opts.Timeout)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	return c, nil
}
