// Package lambdatest is test support for the functions' handlers: the stream
// records Lambda delivers to them and what it makes of their responses, and
// the output CloudWatch collects from them (JSON log lines and EMF metric
// documents).
//
// Record builds a DynamoDB stream record as Lambda delivers it, TTLIdentity
// marks one as a removal by DynamoDB's TTL process, and Failures reads the
// batch item failures of a handler's response. Start runs a stream.Poller
// (an event source mapping, in process) for the length of a test, and
// WaitFor polls until the effects it delivers have arrived. Buffer collects a
// handler's output from several goroutines; Counts and CountsAmong sum the
// EMF counts in it.
//
// A function's main also runs as Lambda runs it: Main (its package's
// TestMain) lets StartFunction run it in a process of its own, against a
// RuntimeAPI, the endpoints aws-lambda-go's own runtime loop polls, with as
// many invocations at once as AWS_LAMBDA_MAX_CONCURRENCY says (Lambda
// Managed Instances); Process.Stop fails the test on any output line that is
// not JSON (a data race the race detector reports is one). RaceBatches and
// CheckStreamFunction race stream batches through it, CheckStartupFailure
// checks the one JSON line a function that cannot start writes.
//
// The package does not import internal/stream, so that the stream package's
// own tests can use it.
package lambdatest
