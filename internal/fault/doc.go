// Package fault injects crashes at named points of a request, so that tests
// and demos can show what a retry does after the function died mid-request.
//
// With injection enabled, a request header Once-Fault: <point> makes the
// request crash when it reaches that point: Check panics with a Crash value.
// The points are the engine's (after-reserve, after-complete, and after each
// recovery point of a multi-step request: after-order-created,
// after-charge-created, after-finished; all passed to
// idempotency.Config.Hook) and the handlers' own (after-provider-call). The
// Lambda adapter recovers a Crash and answers as API Gateway does in front of a
// crashed function. Disabled injection ignores the header entirely; a value
// that is not a point name ("after-" and dashed lower-case words) is ignored,
// and so is a point that no code reaches.
package fault
