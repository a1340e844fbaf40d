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
// The package does not import internal/stream, so that the stream package's
// own tests can use it.
package lambdatest
