// Package bench is `make bench`: it measures what once costs against
// baselines measured in the same run, on DynamoDB Local, and reports one
// table (Report: Markdown, and JSON).
//
// Every endpoint is one entry of the endpoint table (endpoints.go): how to
// prepare a request, how to vary its body, what its business item is and
// how to count its effects. For each, at the api function's Lambda handler
// (built as functions/api builds it), the bench measures every outcome, a
// first request, replays and mismatches on the instance that answered it
// (its replay cache) and on another, concurrent duplicates, a duplicate
// in progress, and the recovery from a crash at each fault point (the
// checker's check, the reconciler's resolution, the client's retry), with
// their DynamoDB calls by operation, capacity units (Meter), latency and
// heap allocations, beside a bare conditional PutItem of the business item
// and a bare TransactWriteItems of it and a record-sized item, in
// alternating rounds. It then reports the bytes a record takes, for each
// endpoint and for 100 KB and 1 MB answers; starts the devstack with a
// route without idempotency and a one-transaction limit (the payment and
// its stored answer in one TransactWriteItems, no framework) beside the
// API's and measures them through the HTTP front door (throughput,
// latency and the devstack's and DynamoDB Local's CPU per request, under
// 16 clients run in a driver process of their own: the bench's command
// again, EnvRole=RoleDriver), the API and the route without idempotency
// under a duplicate storm; and starts each built function under a minimal
// Lambda Runtime API, beside a minimal aws-lambda-go function, for its
// cold start.
//
// It is a tool, not a test: `make test` runs it only at a tiny size
// (TestRunSmall: the handlers, stored sizes, throughput and storms, against
// DynamoDB Local; TestColdStarts: the cold starts of the minimal function
// and the api, built as `make bench` builds them; TestColdEventsCoverFunctions:
// an event for every function), to hold its table to what it promises,
// never to judge a figure.
package bench
