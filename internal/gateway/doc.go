// Package gateway emulates API Gateway for the devstack (emulation only: no
// function links it; in AWS the public idempotency/apigw adapter serves the
// api function, and a crash, injected or not, is a function error that API
// Gateway answers with its DEFAULT_5XX gateway response, as the emulator
// does).
//
// Emulator stands in for a REST API stage: it turns each HTTP
// request into a proxy event (the path percent-encoded as the client sent it,
// the API's own domain name), runs the REQUEST authorizer (caching its policy
// per Authorization header as API Gateway does, and answering 401 and 403 as
// API Gateway does), invokes the function with the event and writes its
// proxy response back, so the devstack runs the same code path as AWS.
// Listener turns the replies Go's HTTP server makes itself to requests it
// refuses (a NUL in a header, a bad Host) into API Gateway's JSON shape.
package gateway
