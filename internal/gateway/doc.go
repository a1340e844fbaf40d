// Package gateway is the API Gateway side of the api function.
//
// In AWS, Lambda (NewLambdaHandler) serves the function's one http.Handler
// for REST API proxy events (payload 1.0) and HTTP API events (payload 2.0,
// also what function URLs send), told apart by the event's "version", through
// aws-lambda-go-api-proxy. Tenant reads the caller's tenant from the
// authorizer context of the request's API Gateway context
// (requestContext.authorizer.tenant, or .authorizer.lambda.tenant in 2.0),
// never from the request itself, and RequestID its request id. An injected
// crash (package fault) is answered as API Gateway answers for a crashed
// function: 500 {"message":"Internal Server Error"}.
//
// Locally, Emulator stands in for a REST API stage: it turns each HTTP
// request into a proxy event, runs the REQUEST authorizer (caching its policy
// per Authorization header as API Gateway does, and answering 401 and 403 as
// API Gateway does), invokes the function with the event and writes its
// proxy response back, so the devstack runs the same code path as AWS.
package gateway
