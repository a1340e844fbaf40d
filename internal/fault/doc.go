// Package fault injects crashes at named points of a request, so that tests
// and demos can show what a retry does after the function died mid-request.
//
// With injection enabled, a request header Once-Fault: <point> makes the
// request crash when it reaches that point: Check panics with a Crash value.
// The points are the engine's (after-reserve, after-complete, passed to
// idempotency.Config.Hook) and the handler's own (after-provider-call). The
// Lambda adapter recovers a Crash and answers as API Gateway does in front of a
// crashed function. Disabled injection ignores the header entirely, and an
// unknown point is ignored too.
package fault
