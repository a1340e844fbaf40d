// Package stream is the Lambda side of DynamoDB Streams for once's
// stream-triggered functions: Process runs a per-record function over a
// batch the way an event source mapping with ReportBatchItemFailures
// expects, Change is the typed view of one record, and ToSDK and FromSDK
// convert images between the Lambda event's form and the DynamoDB SDK's.
//
// # Handlers
//
// A stream handler receives an events.DynamoDBEvent and returns an
// events.DynamoDBEventResponse (Handler). Process runs a per-record function
// over a batch in order and stops at the first failure, reporting that
// record and every later one as batch item failures. Lambda resumes a shard
// from the lowest failed sequence number, so reporting only the failed record
// would let later records of the same batch be applied before it on the retry
// (and again after it): the records of one item must be applied in order.
// Streams deliver at least once, so the per-record function must be
// idempotent. NewChange gives the typed view of a record; ByTTL tells a
// removal by DynamoDB's TTL process from one by a client, but an emulator may
// omit the identity (see Change.ByTTL), so correctness must not depend on it.
package stream

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
)

// Handler is a DynamoDB stream function's handler, as lambda.Start takes it.
type Handler func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
