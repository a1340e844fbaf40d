// Package fault injects crashes at named points of a request, so that tests
// and demos can show what a retry does after the function died mid-request.
//
// With injection enabled, a request header Once-Fault: <point> makes the
// request crash when it reaches that point: Check panics with a Crash value.
// The points are the engine's (after-reserve, after-complete, and after each
// recovery point of a multi-step request: after-order-created,
// after-charge-created, after-finished; all passed to
// idempotency.Config.Hook) and the handlers' own (after-provider-call).
// Nothing recovers a Crash: it leaves the handler as any panic does, so that
// aws-lambda-go reports it as the invocation's error (errorType "Crash") and
// ends the process, and API Gateway answers the client with its gateway
// response for a function error, as for a real crash. Disabled injection
// ignores the header entirely; a value
// that is not a point name ("after-" and dashed lower-case words) is ignored,
// and so is a point that no code reaches.
package fault
