package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/oncehq/once/internal/lambdaenv"
)

// Defaults of Emulator.
const (
	// DefaultAuthorizerTTL is API Gateway's default AuthorizerResultTtlInSeconds.
	DefaultAuthorizerTTL = 300 * time.Second
	// DefaultIntegrationTimeout is API Gateway's default integration timeout.
	DefaultIntegrationTimeout = 29 * time.Second
	// MaxPayload is the largest request body a REST API accepts (10 MB).
	MaxPayload = 10 << 20
	// MaxInvokePayload bounds the event of a synchronous Lambda invocation:
	// "Request must be smaller than 6291456 bytes for the InvokeFunction
	// operation" (RequestEntityTooLargeException). A body under MaxPayload
	// can make an event over it; API Gateway then answers 413 without the
	// function having run.
	MaxInvokePayload = 6 << 20
	// maxInvokeResponse is the largest answer of a synchronous invocation
	// (6 MB and 100 bytes); a larger one is a function error (502).
	maxInvokeResponse = 6<<20 + 100

	DefaultStage     = "prod"
	DefaultRegion    = "us-east-1"
	DefaultAccountID = "000000000000"
	DefaultAPIID     = "localapi01"
)

// Bodies of API Gateway's own responses, byte for byte.
const (
	bodyUnauthorized   = `{"message":"Unauthorized"}`
	bodyExplicitDeny   = `{"Message":"User is not authorized to access this resource with an explicit deny"}`
	bodyImplicitDeny   = `{"Message":"User is not authorized to access this resource"}`
	bodyAuthorizerFail = `{"message": null}`
	bodyBadGateway     = `{"message": "Internal server error"}`
	bodyTimeout        = `{"message": "Endpoint request timed out"}`
	bodyMissingToken   = `{"message":"Missing Authentication Token"}`
	bodyTooLarge       = `{"message":"Request Too Long"}`
	bodyInvokeTooLarge = `{"message": "Request Too Long"}`
)

// ErrInvokePayloadTooLarge is Lambda's refusal of an event over
// MaxInvokePayload, as LambdaProxy returns it: the emulator answers it as API
// Gateway does, 413 {"message": "Request Too Long"} (BadRequestException).
var ErrInvokePayloadTooLarge = errors.New("gateway: the event is over Lambda's invocation payload limit")

// AuthorizeFunc is a REQUEST Lambda authorizer.
type AuthorizeFunc func(context.Context, events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error)

// InvokeFunc is a Lambda function behind a REST API proxy integration
// (payload 1.0).
type InvokeFunc func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error)

// Route is a method on a resource of the REST API.
type Route struct {
	// Method is the HTTP method, or ANY.
	Method string
	// Resource is the resource path, with path parameters in braces:
	// /v1/payments/{id}. A greedy parameter ({proxy+}) must be last and
	// matches one or more segments.
	Resource string
}

// Emulator is a local API Gateway REST API with one Lambda proxy integration
// (payload 1.0) behind an optional REQUEST Lambda authorizer whose identity
// source is the Authorization header. It is an http.Handler; its zero value
// with Invoke set serves every path with no authorizer.
//
// For each request it does what API Gateway does, in this order: refuse a body
// over MaxPayload (413); match a route (403 Missing Authentication Token when
// none matches); without an Authorization header answer 401 without calling
// the authorizer; otherwise take the authorizer's result from the cache or
// call it ("Unauthorized" error: 401, any other error or a malformed result:
// 500) and evaluate its policy against the method ARN (403 unless allowed);
// build the proxy event, with the authorizer's context and principalId in
// requestContext.authorizer; invoke the function (an event Lambda refuses as
// over its payload limit, ErrInvokePayloadTooLarge: 413; an error: 502; no
// answer within the integration timeout: 504); and write its response back.
//
// As on AWS, a client that hangs up does not cancel the invocation: the
// function's context ends only at its deadline. Wait waits for invocations
// still running after their response was given up on.
type Emulator struct {
	// Authorize is the Lambda authorizer; nil means no authorization.
	Authorize AuthorizeFunc
	// Invoke is the integration's Lambda function. Required.
	Invoke InvokeFunc
	// Routes are the API's methods; none means ANY /{proxy+}.
	Routes []Route
	// Stage, Region, AccountID and APIID name the API in events and ARNs
	// (DefaultStage, DefaultRegion, DefaultAccountID, DefaultAPIID).
	Stage, Region, AccountID, APIID string
	// DomainName is the API's domain, the event's requestContext.domainName
	// and Host header whatever Host the client sent, as API Gateway routes
	// by its own domain (default <APIID>.execute-api.<Region>.amazonaws.com).
	DomainName string
	// BinaryMediaTypes is the REST API's binaryMediaTypes ("image/png",
	// "image/*", "*/*"). A request body whose Content-Type matches one goes to
	// the function base64-encoded (isBase64Encoded), any other as text; a
	// function's base64 body (isBase64Encoded) is decoded when the first
	// media type of the request's Accept header matches one, and otherwise
	// goes out as the base64 text it is. None, as in template.yaml, makes
	// every body text.
	BinaryMediaTypes []string
	// AuthorizerTTL is how long an authorizer's result is cached per
	// Authorization value. Zero means DefaultAuthorizerTTL; a negative value
	// disables the cache (AuthorizerResultTtlInSeconds: 0).
	AuthorizerTTL time.Duration
	// Timeout is the integration timeout (DefaultIntegrationTimeout); it is
	// also the deadline of the function's and the authorizer's context.
	Timeout time.Duration
	// Logger receives one line per request (nil discards). It never logs the
	// Authorization header.
	Logger *slog.Logger
	// Now returns the current time (time.Now).
	Now func() time.Time
	// Responses customizes the emulator's own answers (401, 403, 413, 5xx)
	// by response type (ResponseUnauthorized, ...), as a REST API's gateway
	// responses do. An answer whose type has none, and no DEFAULT_4XX or
	// DEFAULT_5XX to fall back on, is API Gateway's default, byte for byte.
	Responses map[string]GatewayResponse

	mu       sync.Mutex
	cache    map[string]cachedAuth
	inflight sync.WaitGroup

	// invokers are the goroutines that run invocations (see run).
	invokersOnce sync.Once
	invokers     chan func() // to an idle one

	lastRequestTime atomic.Pointer[stamp] // see requestTime
}

// stamp is a requestContext.requestTime and the second it names.
type stamp struct {
	unix int64
	text string
}

// invokerIdle is how long an idle invoker waits for another invocation
// before it ends.
const invokerIdle = 30 * time.Second

type cachedAuth struct {
	resp    events.APIGatewayCustomAuthorizerResponse
	expires time.Time
}

// maxCacheEntries bounds the authorizer cache; expired entries are swept when
// it is reached, and the whole cache dropped if that is not enough.
const maxCacheEntries = 4096

// exchange is one request's passage through the emulator.
type exchange struct {
	e         *Emulator
	w         http.ResponseWriter
	r         *http.Request
	path      string // as the client sent it, percent-encoded
	domain    string // the API's domain name (Emulator.DomainName or its default)
	requestID string
	start     time.Time
	route     Route
	params    map[string]string
	auth      string // how the request was authorized: none, cache, lambda
	principal string
}

// ServeHTTP serves one request as API Gateway would.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{e: e, w: w, r: r, path: r.URL.EscapedPath(), domain: e.domainName(), requestID: NewRequestID(), start: e.now(), auth: "none"}
	status, reason := x.serve()
	e.logger().LogAttrs(r.Context(), slog.LevelInfo, "gateway: request",
		slog.String("request_id", x.requestID),
		slog.String("method", r.Method),
		slog.String("path", x.path),
		slog.String("resource", x.route.Resource),
		slog.Int("status", status),
		slog.String("authorizer", x.auth),
		slog.String("principal", x.principal),
		slog.String("reason", reason),
		slog.Int64("latency_ms", e.now().Sub(x.start).Milliseconds()),
	)
}

// serve handles the request and returns the status written and, for
// API Gateway's own answers, why.
func (x *exchange) serve() (int, string) {
	e, r := x.e, x.r
	body, err := io.ReadAll(http.MaxBytesReader(x.w, r.Body, MaxPayload))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return x.fail(gatewayError{ResponseRequestTooLarge, http.StatusRequestEntityTooLarge, "RequestTooLongException",
				bodyTooLarge, "Request Too Long", false, "payload too large"})
		}
		return x.fail(gatewayError{ResponseDefault4XX, http.StatusBadRequest, "BadRequestException",
			`{"message":"Bad request"}`, "Bad request", false, "read body: " + err.Error()})
	}
	route, params, ok := e.match(r.Method, x.path)
	if !ok {
		return x.fail(gatewayError{ResponseMissingAuthenticationToken, http.StatusForbidden, "MissingAuthenticationTokenException",
			bodyMissingToken, "Missing Authentication Token", false, "no route"})
	}
	x.route, x.params = route, params
	ev := x.event(body)

	if e.Authorize != nil {
		authorizer, failure := x.authorize(ev)
		if failure != nil {
			return x.fail(*failure)
		}
		ev.RequestContext.Authorizer = authorizer
	}
	return x.invoke(ev)
}

// event builds the proxy event (payload 1.0) for the request.
//
// A REST API passes the path on as the client sent it, percent-encoded: path,
// requestContext.path and the pathParameters' values are not decoded (an
// %40 in the URL is %40 in pathParameters, serverless/serverless#5037; a
// %20 stays in path, aws/aws-lambda-dotnet#386, where the AWS maintainers
// made the .NET adapter decode it; REST APIs keep the encoding in live
// captures, hotsock/voker#8, while HTTP APIs decode it, see
// Lambda.ProxyV2), and resources match the encoded path's segments.
// requestContext.path starts with the stage, as for the execute-api domain.
func (x *exchange) event(body []byte) events.APIGatewayProxyRequest {
	e, r := x.e, x.r
	headers, multiHeaders := x.headers()
	var query map[string]string
	var multiQuery map[string][]string
	if r.URL.RawQuery != "" {
		values, _ := url.ParseQuery(r.URL.RawQuery)
		if len(values) > 0 {
			query, multiQuery = map[string]string{}, map[string][]string(values)
			for k, vs := range values {
				query[k] = vs[len(vs)-1]
			}
		}
	}
	ev := events.APIGatewayProxyRequest{
		Resource:                        x.route.Resource,
		Path:                            x.path,
		HTTPMethod:                      r.Method,
		Headers:                         headers,
		MultiValueHeaders:               multiHeaders,
		QueryStringParameters:           query,
		MultiValueQueryStringParameters: multiQuery,
		PathParameters:                  x.params,
		RequestContext: events.APIGatewayProxyRequestContext{
			AccountID:         e.accountID(),
			ResourceID:        resourceID(x.route.Resource),
			Stage:             e.stage(),
			DomainName:        x.domain,
			DomainPrefix:      domainPrefix(x.domain),
			RequestID:         x.requestID,
			ExtendedRequestID: extendedRequestID(),
			Protocol:          r.Proto,
			Identity: events.APIGatewayRequestIdentity{
				SourceIP:  sourceIP(r),
				UserAgent: r.UserAgent(),
			},
			ResourcePath:     x.route.Resource,
			Path:             "/" + e.stage() + x.path,
			HTTPMethod:       r.Method,
			RequestTime:      e.requestTime(x.start),
			RequestTimeEpoch: x.start.UnixMilli(),
			APIID:            e.apiID(),
		},
	}
	if len(body) > 0 {
		if e.binary(r.Header.Get("Content-Type")) {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		} else {
			ev.Body = string(body)
		}
	}
	return ev
}

// requestTime formats t as requestContext.requestTime, to the second: the
// text is made once per second and kept, as every request of that second
// has the same.
func (e *Emulator) requestTime(t time.Time) string {
	unix := t.Unix()
	if last := e.lastRequestTime.Load(); last != nil && last.unix == unix {
		return last.text
	}
	text := t.UTC().Format("02/Jan/2006:15:04:05 -0700")
	e.lastRequestTime.Store(&stamp{unix: unix, text: text})
	return text
}

// binary reports whether a media type (a Content-Type or Accept value, of
// which the first element counts) is one of BinaryMediaTypes, which may end
// in a wildcard.
func (e *Emulator) binary(header string) bool {
	if len(e.BinaryMediaTypes) == 0 || header == "" {
		return false
	}
	first, _, _ := strings.Cut(header, ",")
	mt, _, err := mime.ParseMediaType(first)
	if err != nil {
		return false
	}
	typ, _, _ := strings.Cut(mt, "/")
	for _, b := range e.BinaryMediaTypes {
		b = strings.ToLower(b)
		if b == mt || b == "*/*" || b == typ+"/*" {
			return true
		}
	}
	return false
}

// headers returns the request's headers as API Gateway passes them: every
// value in multiValueHeaders, the last one in headers, with the Host and the
// X-Forwarded-* headers its front end adds.
func (x *exchange) headers() (map[string]string, map[string][]string) {
	r := x.r
	multi := make(map[string][]string, len(r.Header)+4)
	n := 0
	for _, vs := range r.Header {
		n += len(vs)
	}
	values := make([]string, 0, n) // every copied value, in one array
	for k, vs := range r.Header {
		start := len(values)
		values = append(values, vs...)
		multi[k] = values[start:len(values):len(values)]
	}
	multi["Host"] = []string{x.domain}
	ip := sourceIP(r)
	if prior := r.Header.Values("X-Forwarded-For"); len(prior) > 0 {
		multi["X-Forwarded-For"] = []string{strings.Join(prior, ", ") + ", " + ip}
	} else {
		multi["X-Forwarded-For"] = []string{ip}
	}
	proto, port := "http", "80"
	if r.TLS != nil {
		proto, port = "https", "443"
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, p, err := net.SplitHostPort(local.String()); err == nil {
			port = p
		}
	}
	multi["X-Forwarded-Proto"] = []string{proto}
	multi["X-Forwarded-Port"] = []string{port}
	single := make(map[string]string, len(multi))
	for k, vs := range multi {
		single[k] = vs[len(vs)-1]
	}
	return single, multi
}

// authorize runs the authorizer for ev (or takes its cached result) and
// evaluates the policy. It returns the requestContext.authorizer map when the
// request is allowed, else the answer to give.
func (x *exchange) authorize(ev events.APIGatewayProxyRequest) (map[string]any, *gatewayError) {
	e := x.e
	identity := ev.Headers["Authorization"]
	if identity == "" {
		g := errUnauthorized("identity source missing")
		return nil, &g
	}
	methodArn := e.methodArn(ev.HTTPMethod, ev.Path)
	resp, cached := e.cached(identity)
	latency := int64(0)
	if cached {
		x.auth = "cache"
	} else {
		x.auth = "lambda"
		t0 := e.now()
		var err error
		resp, err = x.callAuthorizer(x.authorizerRequest(ev, methodArn))
		latency = e.now().Sub(t0).Milliseconds()
		switch {
		case err != nil && errorMessage(err) == "Unauthorized":
			g := errUnauthorized("authorizer: Unauthorized")
			return nil, &g
		case err != nil:
			return nil, &gatewayError{ResponseAuthorizerFailure, http.StatusInternalServerError, "AuthorizerConfigurationException",
				bodyAuthorizerFail, "", true, "authorizer error: " + err.Error()}
		}
		if err := checkAuthorizerResponse(resp); err != nil {
			return nil, &gatewayError{ResponseAuthorizerConfigurationError, http.StatusInternalServerError, "AuthorizerConfigurationException",
				bodyAuthorizerFail, "", true, "authorizer configuration: " + err.Error()}
		}
		e.store(identity, resp)
	}
	x.principal = resp.PrincipalID
	switch evaluate(resp.PolicyDocument, methodArn) {
	case explicitDeny:
		g := errDenied(true)
		return nil, &g
	case implicitDeny:
		g := errDenied(false)
		return nil, &g
	}
	authorizer := map[string]any{
		"principalId":        resp.PrincipalID,
		"integrationLatency": latency,
	}
	// REST APIs pass the context's values to the integration as strings.
	for k, v := range resp.Context {
		authorizer[k] = contextString(v)
	}
	return authorizer, nil
}

func (x *exchange) authorizerRequest(ev events.APIGatewayProxyRequest, methodArn string) events.APIGatewayCustomAuthorizerRequestTypeRequest {
	rc := ev.RequestContext
	return events.APIGatewayCustomAuthorizerRequestTypeRequest{
		Type:                            "REQUEST",
		MethodArn:                       methodArn,
		Resource:                        ev.Resource,
		Path:                            ev.Path,
		HTTPMethod:                      ev.HTTPMethod,
		Headers:                         ev.Headers,
		MultiValueHeaders:               ev.MultiValueHeaders,
		QueryStringParameters:           ev.QueryStringParameters,
		MultiValueQueryStringParameters: ev.MultiValueQueryStringParameters,
		PathParameters:                  ev.PathParameters,
		StageVariables:                  ev.StageVariables,
		RequestContext: events.APIGatewayCustomAuthorizerRequestTypeRequestContext{
			Path:         rc.Path,
			AccountID:    rc.AccountID,
			ResourceID:   rc.ResourceID,
			Stage:        rc.Stage,
			RequestID:    rc.RequestID,
			Identity:     events.APIGatewayCustomAuthorizerRequestTypeRequestIdentity{SourceIP: rc.Identity.SourceIP},
			ResourcePath: rc.ResourcePath,
			HTTPMethod:   rc.HTTPMethod,
			APIID:        rc.APIID,
		},
	}
}

// callAuthorizer runs the authorizer with a Lambda-like context, turning a
// panic into an error as the Lambda runtime does.
func (x *exchange) callAuthorizer(req events.APIGatewayCustomAuthorizerRequestTypeRequest) (resp events.APIGatewayCustomAuthorizerResponse, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.r.Context()), x.e.timeout())
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			x.e.logger().ErrorContext(ctx, "gateway: authorizer panicked",
				"request_id", x.requestID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("gateway: authorizer panicked: %v", v)
		}
	}()
	return x.e.Authorize(ctx, req)
}

// invoke calls the function and writes its response, or 502/504.
func (x *exchange) invoke(ev events.APIGatewayProxyRequest) (int, string) {
	e := x.e
	// The invocation outlives a client that hangs up, as on AWS, but not its
	// deadline.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.r.Context()), e.timeout())
	type result struct {
		resp events.APIGatewayProxyResponse
		err  error
	}
	done := make(chan result, 1)
	e.inflight.Add(1)
	e.run(func() {
		defer e.inflight.Done()
		defer cancel()
		var res result
		defer func() { done <- res }()
		// A Lambda runtime reports a panic as a function error (as a
		// lambdaenv.Function does); an InvokeFunc that panics all the same
		// is answered as one too.
		defer func() {
			if v := recover(); v != nil {
				e.logger().ErrorContext(ctx, "gateway: function panicked",
					"request_id", x.requestID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				res.err = fmt.Errorf("gateway: function panicked: %v", v)
			}
		}()
		res.resp, res.err = e.Invoke(ctx, ev)
	})

	timer := time.NewTimer(e.timeout())
	defer timer.Stop()
	var res result
	select {
	case res = <-done:
	case <-timer.C:
		return x.fail(gatewayError{ResponseIntegrationTimeout, http.StatusGatewayTimeout, "",
			bodyTimeout, "Endpoint request timed out", false, "integration timeout"})
	}
	if errors.Is(res.err, ErrInvokePayloadTooLarge) {
		// Lambda refused the invocation (RequestEntityTooLargeException): an
		// integration failure, as Lambda's refusal of a throttled invocation
		// is (INTEGRATION_FAILURE once customized, re:Post
		// QUL-z6rJbmR4meafB7MzYXxw); by default 413 as Lambda answered.
		return x.fail(gatewayError{ResponseIntegrationFailure, http.StatusRequestEntityTooLarge, "BadRequestException",
			bodyInvokeTooLarge, "Request Too Long", false, "event over Lambda's payload limit"})
	}
	if res.err != nil {
		return x.fail(badGateway("function error: " + res.err.Error()))
	}
	return x.respond(res.resp)
}

// run runs f, which must not panic, on an idle invoker, or on a new one
// when none is idle. An invoker is a goroutine that runs invocations one
// after the other and ends once none has come for invokerIdle: a goroutine
// per invocation would grow its stack anew each time to the depth a
// function's call goes to (the AWS SDK's middleware), copying it at each
// step, where a Lambda runtime's loop keeps its stack from one invocation
// to the next.
func (e *Emulator) run(f func()) {
	e.invokersOnce.Do(func() { e.invokers = make(chan func()) })
	select {
	case e.invokers <- f:
	default:
		go e.invoker(f)
	}
}

// invoker runs f, then each invocation handed to it, until it has been idle
// for invokerIdle.
func (e *Emulator) invoker(f func()) {
	idle := time.NewTimer(invokerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(invokerIdle)
		select {
		case f = <-e.invokers:
		case <-idle.C:
			return
		}
	}
}

// hopHeaders are not passed on from the function's response; Content-Length is
// recomputed.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
}

// respond writes the function's response as API Gateway does: headers merged
// from headers and multiValueHeaders (multiValueHeaders win), body decoded
// from base64 when isBase64Encoded and the request accepts a binary media
// type (else sent as the base64 text), Content-Type application/json by
// default.
func (x *exchange) respond(resp events.APIGatewayProxyResponse) (int, string) {
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		return x.fail(badGateway(fmt.Sprintf("malformed proxy response: statusCode %d", resp.StatusCode)))
	}
	var decoded []byte // the body, when it goes out decoded from base64
	if resp.IsBase64Encoded && x.e.binary(x.r.Header.Get("Accept")) {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			return x.fail(badGateway("malformed proxy response: body is not base64"))
		}
		decoded = b
	}
	h := x.w.Header()
	for k, vs := range resp.MultiValueHeaders {
		if hopHeaders[http.CanonicalHeaderKey(k)] {
			continue
		}
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for k, v := range resp.Headers {
		if hopHeaders[http.CanonicalHeaderKey(k)] || len(h.Values(k)) > 0 {
			continue
		}
		h.Set(k, v)
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	h.Set("X-Amzn-Requestid", x.requestID)
	x.w.WriteHeader(resp.StatusCode)
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified {
		if decoded != nil {
			_, _ = x.w.Write(decoded)
		} else {
			_, _ = io.WriteString(x.w, resp.Body)
		}
	}
	return resp.StatusCode, ""
}

// badGateway is API Gateway's answer to a function error or a malformed proxy
// response: 502 {"message": "Internal server error"}. No response type is
// its own: it takes DEFAULT_5XX ("If the function runs but returns an error,
// or returns a response in the wrong format, API Gateway returns a 502", the
// Lambda developer guide's services-apigateway-errors).
func badGateway(reason string) gatewayError {
	return gatewayError{ResponseDefault5XX, http.StatusBadGateway, "", bodyBadGateway, "Internal server error", false, reason}
}

// checkAuthorizerResponse rejects what API Gateway rejects as an authorizer
// configuration error: no principal, no policy statement, or a context value
// that is not a string, number or boolean.
func checkAuthorizerResponse(resp events.APIGatewayCustomAuthorizerResponse) error {
	if resp.PrincipalID == "" {
		return errors.New("no principalId")
	}
	if len(resp.PolicyDocument.Statement) == 0 {
		return errors.New("policy has no statement")
	}
	for k, v := range resp.Context {
		switch v.(type) {
		case string, bool, float64, float32, int, int8, int16, int32, int64,
			uint, uint8, uint16, uint32, uint64, json.Number:
		default:
			return fmt.Errorf("context value %q is a %T, not a string, number or boolean", k, v)
		}
	}
	return nil
}

type decision int

const (
	implicitDeny decision = iota
	allowed
	explicitDeny
)

// evaluate applies an IAM policy to an execute-api:Invoke of methodArn: an
// explicit Deny wins over any Allow; no matching statement denies.
func evaluate(doc events.APIGatewayCustomAuthorizerPolicy, methodArn string) decision {
	d := implicitDeny
	for _, s := range doc.Statement {
		if !matchAny(s.Action, "execute-api:Invoke", true) || !matchAny(s.Resource, methodArn, false) {
			continue
		}
		switch s.Effect {
		case "Deny":
			return explicitDeny
		case "Allow":
			d = allowed
		}
	}
	return d
}

func matchAny(patterns []string, s string, fold bool) bool {
	if fold {
		s = strings.ToLower(s)
	}
	for _, p := range patterns {
		if fold {
			p = strings.ToLower(p)
		}
		if wildcard(p, s) {
			return true
		}
	}
	return false
}

// wildcard matches s against an IAM pattern, where * matches any run of
// characters (slashes included) and ? any one character.
func wildcard(p, s string) bool {
	var pi, si, star, mark = 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi, mark = star+1, mark+1
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

func (e *Emulator) cached(identity string) (events.APIGatewayCustomAuthorizerResponse, bool) {
	if e.authorizerTTL() <= 0 {
		return events.APIGatewayCustomAuthorizerResponse{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.cache[identity]
	if !ok || !e.now().Before(c.expires) {
		return events.APIGatewayCustomAuthorizerResponse{}, false
	}
	return c.resp, true
}

func (e *Emulator) store(identity string, resp events.APIGatewayCustomAuthorizerResponse) {
	ttl := e.authorizerTTL()
	if ttl <= 0 {
		return
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cache == nil {
		e.cache = map[string]cachedAuth{}
	}
	if len(e.cache) >= maxCacheEntries {
		for k, c := range e.cache {
			if !now.Before(c.expires) {
				delete(e.cache, k)
			}
		}
		if len(e.cache) >= maxCacheEntries {
			clear(e.cache)
		}
	}
	e.cache[identity] = cachedAuth{resp: resp, expires: now.Add(ttl)}
}

// FlushAuthorizerCache drops every cached authorizer result, as the console's
// "Flush authorizer cache" does.
func (e *Emulator) FlushAuthorizerCache() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.cache)
}

// Wait waits until no invocation is running (the response to some may have
// been a 504 already), or until ctx is done. Call it once no new request can
// arrive, after the server's Shutdown.
func (e *Emulator) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		e.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway: invocations still running: %w", ctx.Err())
	}
}

// match finds the route for a request, and its path parameters.
func (e *Emulator) match(method, path string) (Route, map[string]string, bool) {
	routes := e.Routes
	if len(routes) == 0 {
		routes = []Route{{Method: "ANY", Resource: "/{proxy+}"}}
	}
	for _, rt := range routes {
		if rt.Method != "ANY" && !strings.EqualFold(rt.Method, method) {
			continue
		}
		if params, ok := matchResource(rt.Resource, path); ok {
			return rt, params, true
		}
	}
	return Route{}, nil, false
}

// matchResource matches a request path against a resource path.
func matchResource(resource, path string) (map[string]string, bool) {
	if resource == "/" || path == "/" {
		return nil, resource == path
	}
	rs := strings.Split(strings.TrimPrefix(resource, "/"), "/")
	ps := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var params map[string]string
	for i, seg := range rs {
		name, isParam := strings.CutPrefix(seg, "{")
		name, _ = strings.CutSuffix(name, "}")
		if isParam && strings.HasSuffix(name, "+") {
			rest := strings.Join(ps[min(i, len(ps)):], "/")
			if rest == "" {
				return nil, false
			}
			if params == nil {
				params = map[string]string{}
			}
			params[strings.TrimSuffix(name, "+")] = rest
			return params, true
		}
		if i >= len(ps) || ps[i] == "" {
			return nil, false
		}
		switch {
		case isParam:
			if params == nil {
				params = map[string]string{}
			}
			params[name] = ps[i]
		case seg != ps[i]:
			return nil, false
		}
	}
	return params, len(ps) == len(rs)
}

// methodArn is the ARN of a method call, as the authorizer receives it:
// arn:aws:execute-api:region:account:api/stage/METHOD/path.
func (e *Emulator) methodArn(method, path string) string {
	return "arn:aws:execute-api:" + e.region() + ":" + e.accountID() + ":" + e.apiID() + "/" + e.stage() + "/" + method + path
}

func (e *Emulator) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Emulator) logger() *slog.Logger {
	if e.Logger != nil {
		return e.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (e *Emulator) authorizerTTL() time.Duration {
	if e.AuthorizerTTL == 0 {
		return DefaultAuthorizerTTL
	}
	return e.AuthorizerTTL
}

func (e *Emulator) timeout() time.Duration {
	if e.Timeout > 0 {
		return e.Timeout
	}
	return DefaultIntegrationTimeout
}

func (e *Emulator) domainName() string {
	return or(e.DomainName, e.apiID()+".execute-api."+e.region()+".amazonaws.com")
}

func (e *Emulator) stage() string     { return or(e.Stage, DefaultStage) }
func (e *Emulator) region() string    { return or(e.Region, DefaultRegion) }
func (e *Emulator) accountID() string { return or(e.AccountID, DefaultAccountID) }
func (e *Emulator) apiID() string     { return or(e.APIID, DefaultAPIID) }

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

func sourceIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

func domainPrefix(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	prefix, _, _ := strings.Cut(host, ".")
	return prefix
}

// resourceID is a stable 6-character id for a resource path, like API
// Gateway's resource ids.
func resourceID(resource string) string {
	sum := sha256.Sum256([]byte(resource))
	return hex.EncodeToString(sum[:3])
}

func extendedRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// NewRequestID returns a random (version 4) UUID, as AWS request IDs are.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var id [36]byte
	hex.Encode(id[0:8], b[0:4])
	id[8] = '-'
	hex.Encode(id[9:13], b[4:6])
	id[13] = '-'
	hex.Encode(id[14:18], b[6:8])
	id[18] = '-'
	hex.Encode(id[19:23], b[8:10])
	id[23] = '-'
	hex.Encode(id[24:36], b[10:16])
	return string(id[:])
}

// LambdaProxy returns an InvokeFunc that runs h as the Lambda service runs a
// function: the event is marshalled to JSON (one of MaxInvokePayload bytes
// or more is ErrInvokePayloadTooLarge, and h is not invoked), h is invoked
// with a Lambda context (a fresh AwsRequestID), and its JSON result (an
// error when over Lambda's response limit) unmarshalled.
//
// The emulator invokes h from many goroutines at once, and each result must
// be its own: pass a *lambdaenv.Function, which runs the fn a function's main
// gives lambda.Start in execution environments (and reports a panic as the
// runtime does, a function error, which the emulator answers 502 or the
// API's DEFAULT_5XX). A bare lambda.NewHandler(fn)
// is not safe: its Invoke returns a pooled buffer that a concurrent
// invocation overwrites.
func LambdaProxy(h lambda.Handler) InvokeFunc {
	return viaLambda[events.APIGatewayProxyRequest, events.APIGatewayProxyResponse](h)
}

// LambdaAuthorizer returns an AuthorizeFunc that runs h as the Lambda service
// runs a function, like LambdaProxy. The error "Unauthorized" comes back as
// an error with that message (from a *lambdaenv.Function, a FunctionError
// whose Message it is), which the emulator answers 401.
func LambdaAuthorizer(h lambda.Handler) AuthorizeFunc {
	return viaLambda[events.APIGatewayCustomAuthorizerRequestTypeRequest, events.APIGatewayCustomAuthorizerResponse](h)
}

func viaLambda[In, Out any](h lambda.Handler) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		var out Out
		payload, err := json.Marshal(in)
		if err != nil {
			return out, fmt.Errorf("gateway: encode event: %w", err)
		}
		if len(payload) >= MaxInvokePayload {
			return out, fmt.Errorf("%w: %d bytes", ErrInvokePayloadTooLarge, len(payload))
		}
		ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: NewRequestID()})
		res, err := h.Invoke(ctx, payload)
		if err != nil {
			return out, err
		}
		if len(res) > maxInvokeResponse {
			return out, fmt.Errorf("gateway: the function's answer of %d bytes is over Lambda's response payload limit", len(res))
		}
		if err := json.Unmarshal(res, &out); err != nil {
			return out, fmt.Errorf("gateway: decode function result: %w", err)
		}
		return out, nil
	}
}

// errorMessage is an invocation error's errorMessage, which API Gateway
// reads: a function error's (lambdaenv.FunctionError) message, else the
// error's text.
func errorMessage(err error) string {
	if fe, ok := errors.AsType[*lambdaenv.FunctionError](err); ok {
		return fe.Message
	}
	return err.Error()
}

// contextString renders an authorizer context value as a REST API passes it
// to the integration: as a string.
func contextString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 32)
	default:
		return fmt.Sprint(v)
	}
}
