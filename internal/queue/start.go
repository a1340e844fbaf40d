package queue

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncehq/once/idempotency/recovery/sqsqueue"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
)

// Handler is an SQS-triggered Lambda handler, as lambda.Start takes it.
type Handler = func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// Clients are the AWS clients of a function that uses queues.
type Clients struct {
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
}

// NewClients returns the DynamoDB and SQS clients for cfg.
func NewClients(ctx context.Context, cfg config.Config) (Clients, error) {
	db, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return Clients{}, err
	}
	q, err := Client(ctx, cfg, ClientOptions{})
	if err != nil {
		return Clients{}, err
	}
	return Clients{DynamoDB: db, SQS: q}, nil
}

// Builder builds a function's Lambda handler (a stream or an SQS handler)
// from its configuration and clients.
type Builder[H any] func(ctx context.Context, cfg config.Config, c Clients, opts app.Options) (H, error)

// Start runs a function that uses queues, as its main does: it loads the
// configuration from getenv, builds the clients and the handler under the
// default Options, and hands the handler to the Lambda runtime, which serves
// invocations until the process ends. It returns the error that kept the
// function from starting; nothing is started then.
func Start[H any](ctx context.Context, getenv func(string) string, build Builder[H]) error {
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	c, err := NewClients(ctx, cfg)
	if err != nil {
		return err
	}
	h, err := build(ctx, cfg, c, app.Options{})
	if err != nil {
		return err
	}
	lambda.StartWithOptions(h, lambda.WithContext(ctx))
	return nil
}

// Open returns the queue cfgValue names (a name or a URL) through c.SQS,
// resolving a name once, at start: the library's sqsqueue.Queue, which
// sends each message with its own delay.
func Open(ctx context.Context, c Clients, cfgValue, env string) (*sqsqueue.Queue, error) {
	url, err := Resolve(ctx, c.SQS, cfgValue)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", env, err)
	}
	q, err := sqsqueue.New(c.SQS, url)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", env, err)
	}
	return q, nil
}
