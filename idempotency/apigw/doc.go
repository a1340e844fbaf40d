// Package apigw serves API Gateway with an http.Handler in a Lambda
// function, for handlers made idempotent by package idempotency: Tenant
// reads the caller's tenant from the authorizer's context (never from the
// request), and Lambda turns REST API (payload 1.0), HTTP API and function
// URL (payload 2.0) proxy events into requests through
// aws-lambda-go-api-proxy, an HTTP API's named stage taken off the path, and
// every path and host API Gateway can send made proxyable, so that a hostile
// path (an encoded newline, "%zz", a NUL) is the handler's 404, never an
// adapter error, a 502 or a raw log line. The handler's response goes out
// with the status net/http would send.
//
// Lambda returns at most MaxResponse (6 MB) of proxy response, less than
// the store keeps of an answer: Deliverable, as idempotency.Config's
// Deliverable, has the Middleware refuse an answer whose proxy response
// (ResponseSize, measured in the encoding the adapter uses, REST API or
// HTTP API and function URL) would be larger, 500 response_too_large,
// before it is stored, rather than store one that no replay can return.
//
// A main, in outline (client is a *dynamodb.Client, notes your handler;
// once.Middleware and once.Start do the same, and the README's "Use once in
// your own Lambda" has a complete one; see also ExampleNewLambda):
//
//	func main() {
//		mw, _ := idempotency.New(idempotency.Config{Store: dynamo.New(client, table), Tenant: apigw.Tenant, Deliverable: apigw.Deliverable})
//		mux := http.NewServeMux()
//		mux.Handle("POST /v1/notes", mw.Atomic("POST /v1/notes", notes))
//		lambda.Start(apigw.NewLambda(mux))
//	}
package apigw
