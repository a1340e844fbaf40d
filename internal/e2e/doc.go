// Package e2e holds the end-to-end tests of the api function: real API
// Gateway proxy events (REST payload 1.0 and HTTP API payload 2.0) through
// the public idempotency/apigw adapter and the handler app.API builds, run
// as the Lambda runtime runs them (package lambdaenv: an injected crash is
// the invocation's function error, and the instance is replaced), against
// DynamoDB Local with the tables of template.yaml. It has no code of its own.
package e2e
