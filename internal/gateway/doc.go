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
// Lambda hands aws-lambda-go-api-proxy only URL parts that parse (escaping
// what a path may not hold as such, replacing a domain name that is no
// host), so that any path reaches the handler, which answers 404 for one it
// does not serve, and the proxy never prints the raw path.
//
// Locally, Emulator stands in for a REST API stage: it turns each HTTP
// request into a proxy event (the path percent-encoded as the client sent it,
// the API's own domain name), runs the REQUEST authorizer (caching its policy
// per Authorization header as API Gateway does, and answering 401 and 403 as
// API Gateway does), invokes the function with the event and writes its
// proxy response back, so the devstack runs the same code path as AWS.
// Listener turns the replies Go's HTTP server makes itself to requests it
// refuses (a NUL in a header, a bad Host) into API Gateway's JSON shape.
package gateway
