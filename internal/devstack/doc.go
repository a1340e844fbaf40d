// Package devstack runs the whole service on one machine, as `make run` does:
// DynamoDB Local (or any DYNAMODB_ENDPOINT, such as LocalStack), the tables of
// template.yaml, demo API keys, and the API Gateway emulator in front of the
// same Lambda handlers a deployment runs (the REQUEST authorizer, then the
// api function behind a proxy integration), each run in Lambda execution
// environments (package lambdaenv: one invocation at a time each, as Lambda
// runs them) through the Lambda runtime's own JSON path. The gateway is
// served through gateway.Listener, so that even a request Go's HTTP server
// refuses itself gets a JSON answer. The provider simulator is served as its
// function URL serves it: with the template's AuthType AWS_IAM, a call not
// signed with the functions' credentials gets Lambda's 403 (package
// functionurl), and the functions sign theirs.
//
// A Stack is a list of components started in order and stopped in reverse
// order: a failed start stops what had started, and Close shuts the HTTP
// server down gracefully (in-flight requests finish) before it stops the
// database. Adding a component (a stream poller, the provider simulator) is
// adding a step to Start.
package devstack
