// Package sqsclient builds the SQS clients of once's functions and of the
// public sqsqueue package alike: the AWS configuration of dynamoclient
// (bounded retries, structured SDK logs, dummy credentials for a local
// endpoint) and the endpoint override. Only the binaries that use SQS link
// it.
package sqsclient

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncehq/once/internal/dynamoclient"
)

// New returns an SQS client in region, at endpoint when it is set (a local
// SQS, or an AWS endpoint such as a VPC endpoint), each HTTP attempt bounded
// by timeout. A malformed endpoint or no region is an error, as
// dynamoclient.Config reports it.
func New(ctx context.Context, endpoint, region string, timeout time.Duration) (*sqs.Client, error) {
	cfg, err := dynamoclient.Config(ctx, dynamoclient.Options{
		Endpoint: endpoint, Region: region, Timeout: timeout, MaxBackoff: time.Second,
	})
	if err != nil {
		return nil, err
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}
