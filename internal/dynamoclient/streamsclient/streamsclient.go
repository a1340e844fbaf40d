// Package streamsclient builds the DynamoDB Streams client of the local
// stream pollers (internal/stream, run by the devstack) and of the tests.
// No function reads a stream through the API (Lambda's event source
// mappings do), so no function links this package or the Streams SDK; the
// AWS configuration, and with it the structured SDK logger, is
// dynamoclient.Config's.
package streamsclient

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
)

// New returns a DynamoDB Streams client for cfg (from dynamoclient.Config),
// sending to endpoint when it is not empty.
func New(cfg aws.Config, endpoint string) *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(cfg, func(o *dynamodbstreams.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
}
