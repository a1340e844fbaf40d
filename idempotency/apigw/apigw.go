package apigw

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"
)

// TenantKey is the authorizer context key that carries the caller's tenant,
// for Tenant.
const TenantKey = "tenant"

// Tenant returns the caller's tenant from the authorizer context of the
// request's API Gateway event: requestContext.authorizer.tenant for a REST API
// (payload 1.0), requestContext.authorizer.lambda.tenant for an HTTP API
// (payload 2.0). It never looks at the request's own headers, which the caller
// controls.
// It is idempotency.Config's Tenant for an authorizer that puts the tenant
// under TenantKey; TenantFrom reads another key.
func Tenant(r *http.Request) (string, bool) { return tenantFrom(r, TenantKey) }

// TenantFrom returns a Tenant that reads the authorizer context key key (a
// Lambda authorizer's context, or a Cognito or JWT authorizer's claims are
// under "claims" in payload 1.0: use a key your authorizer sets as a string).
// The middleware refuses a tenant outside idempotency's tenant rule
// (idempotency.ValidateTenant) with 403 tenant_invalid. The rule takes any
// printable UTF-8 up to idempotency.MaxTenantLength (1024) bytes, spaces
// and non-ASCII included, so a principal ARN, an e-mail address or an
// org's name serve as they are; a key whose value may hold '#' or control
// characters needs mapping to an id first.
func TenantFrom(key string) func(*http.Request) (string, bool) {
	return func(r *http.Request) (string, bool) { return tenantFrom(r, key) }
}

func tenantFrom(r *http.Request, key string) (string, bool) {
	ctx := r.Context()
	var authorizer map[string]any
	if rc, ok := core.GetAPIGatewayContextFromContext(ctx); ok {
		authorizer = rc.Authorizer
	} else if rc, ok := core.GetAPIGatewayV2ContextFromContext(ctx); ok && rc.Authorizer != nil {
		authorizer = rc.Authorizer.Lambda
	}
	s, ok := authorizer[key].(string)
	return s, ok && s != ""
}

// RequestID returns API Gateway's request ID for the request, if it came
// through the Lambda adapter.
func RequestID(r *http.Request) (string, bool) {
	ctx := r.Context()
	if rc, ok := core.GetAPIGatewayContextFromContext(ctx); ok && rc.RequestID != "" {
		return rc.RequestID, true
	}
	if rc, ok := core.GetAPIGatewayV2ContextFromContext(ctx); ok && rc.RequestID != "" {
		return rc.RequestID, true
	}
	return "", false
}

// Lambda serves API Gateway proxy events with an http.Handler, through
// aws-lambda-go-api-proxy's request and response translation (package core).
//
// The handler's response is the one net/http would send: a handler that
// writes nothing answers 200, the first status written is the status, and a
// WriteHeader after it (a second one, or one after Write) changes nothing.
// (The proxy's own response writer takes the last status written, and a
// handler that writes nothing is an error it prints to stdout, which API
// Gateway turns into a 502.)
//
// The adapter returns a response body as text when it is valid UTF-8 and
// base64 (isBase64Encoded) otherwise; the API only writes JSON, which is
// UTF-8, and the response of a replay is the stored bytes, so a replay goes out
// exactly as the original did. (A REST API sends a base64 body on decoded only
// when the request's Accept matches one of its binaryMediaTypes; otherwise
// the client gets the base64 text.)
//
// A Lambda is a lambda.Handler (package github.com/aws/aws-lambda-go/lambda):
// pass it to lambda.Start, which then hands it each event's bytes as they
// came and sends its answer's bytes as they are. (A handler function taking
// and returning a json.RawMessage, as NewLambdaHandler returns, has the
// runtime decode each event into a copy and encode each answer again: the
// same bytes, for more work.)
//
// A Lambda is safe for concurrent use (Lambda Managed Instances run several
// invocations per execution environment).
type Lambda struct {
	h  http.Handler
	v1 core.RequestAccessor
	v2 core.RequestAccessorV2
}

// NewLambda returns a Lambda serving h.
func NewLambda(h http.Handler) *Lambda {
	return &Lambda{h: h}
}

// NewLambdaHandler returns a function that serves REST API (payload 1.0) and
// HTTP API (payload 2.0) proxy events (and function URL events, which are
// payload 2.0) with h, as the Lambda of NewLambda(h) does. lambda.Start
// serves NewLambda(h) with less work: see Lambda.
func NewLambdaHandler(h http.Handler) func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	l := NewLambda(h)
	return func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
		return l.Invoke(ctx, payload)
	}
}

// Invoke serves one proxy event of either payload version, told apart by its
// "version" field ("2.0" for HTTP API payload 2.0; absent or "1.0" otherwise),
// and returns the proxy response as JSON. A payload that is not an event of
// either version is an error.
func (l *Lambda) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	resp, err := l.serve(ctx, payload)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("gateway: encode response: %w", err)
	}
	return out, nil
}

// restEvent is a REST API event together with the "version" field that tells
// it from an HTTP API event: no field of APIGatewayProxyRequest takes that
// key, even case-insensitively as encoding/json matches keys, so decoding
// into a restEvent gives Version what decoding the version alone gives, and
// the embedded event what decoding the event alone gives.
type restEvent struct {
	Version string `json:"version"`
	events.APIGatewayProxyRequest
}

// serve decodes payload and serves it, returning the proxy response of its
// payload version.
//
// An event is decoded once: as the version it most likely has (payload 2.0
// when `"2.0"` appears in it, else 1.0), into a type whose "version" field
// decodes as the version alone would. When that decode succeeds and the
// version is the one guessed, the event is served; otherwise (a wrong guess,
// an event that does not decode) serve goes the long way, decoding the
// version first and then the event of that version, with the errors that
// way gives. Both ways read the same version and the same event from the
// payload.
func (l *Lambda) serve(ctx context.Context, payload []byte) (any, error) {
	if bytes.Contains(payload, []byte(`"2.0"`)) {
		var ev events.APIGatewayV2HTTPRequest
		if json.Unmarshal(payload, &ev) == nil && ev.Version == "2.0" {
			return l.ProxyV2(ctx, ev)
		}
	} else {
		var ev restEvent
		if json.Unmarshal(payload, &ev) == nil && ev.Version != "2.0" {
			return l.ProxyV1(ctx, httpAPIv1(ev.Version, ev.APIGatewayProxyRequest))
		}
	}
	var probe struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(payload, &probe); err != nil {
		return nil, fmt.Errorf("gateway: not an API Gateway proxy event: %w", err)
	}
	if probe.Version == "2.0" {
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("gateway: decode HTTP API event: %w", err)
		}
		return l.ProxyV2(ctx, ev)
	}
	var ev events.APIGatewayProxyRequest
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("gateway: decode REST API event: %w", err)
	}
	return l.ProxyV1(ctx, httpAPIv1(probe.Version, ev))
}

// httpAPIv1 returns a payload 1.0 event as ProxyV1 serves it, given its
// "version" field: a REST API's event has none and its path never holds the
// stage; an HTTP API's ("1.0") has its named stage in the path on the
// execute-api endpoint, removed as ProxyV2 removes it from rawPath.
func httpAPIv1(version string, ev events.APIGatewayProxyRequest) events.APIGatewayProxyRequest {
	if version == "1.0" {
		ev.Path = stripStage(ev.Path, ev.RequestContext.Stage, ev.RequestContext.DomainName)
	}
	return ev
}

// ProxyV1 serves a REST API proxy event (payload 1.0), its path as it is
// (Invoke also takes an HTTP API's named stage off the path of a payload 1.0
// event, which only its "version" field tells from a REST API's). A panic of
// the handler goes on: under lambda.Start, aws-lambda-go reports it as the
// invocation's error and ends the process, and API Gateway answers the
// client as for any function error (a REST API: 502, its DEFAULT_5XX gateway
// response when one is declared).
//
// The path reaches the handler whatever it holds (see proxyablePath): a path
// the handler does not serve is its 404, never an error of the adapter. An
// event no API Gateway sends (a method that is not an HTTP token, a body
// that is not the base64 it claims to be) is an error.
func (l *Lambda) ProxyV1(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	if err := checkEvent(ev.HTTPMethod, ev.Body, ev.IsBase64Encoded); err != nil {
		return events.APIGatewayProxyResponse{}, err
	}
	ev.Path = proxyablePath(ev.Path)
	ev.RequestContext.DomainName = proxyableHost(ev.RequestContext.DomainName)
	req, err := l.v1.EventToRequestWithContext(ctx, ev)
	if err != nil {
		return events.APIGatewayProxyResponse{}, fmt.Errorf("gateway: REST API event to request: %w", err)
	}
	return serveProxy(l.h, req, core.NewProxyResponseWriter())
}

// ProxyV2 serves an HTTP API proxy event (payload 2.0); a panic of the
// handler goes on, as in ProxyV1 (an HTTP API answers a function error 500
// {"message":"Internal Server Error"}).
//
// The proxy splits every header value but a few singletons on commas (API
// Gateway joins repeated headers with commas in payload 2.0), except, here,
// a comma inside a quoted string: an Idempotency-Key sent twice, or a bare
// one holding a comma (a,b), reaches the handler as two values and is
// refused as repeated; an sf-string holding a comma ("a,b") as one.
//
// On an HTTP API's own endpoint ({api-id}.execute-api.{region}.amazonaws.com),
// a stage other than $default is the first segment of rawPath: it is
// removed, so that the handler sees the path as a REST API's event gives it
// (without the stage), whichever stage serves it. A custom domain's path and
// a function URL's (stage $default) are left as they are.
//
// Paths are made proxyable as in ProxyV1. An HTTP API hands over rawPath
// already decoded ("API Gateway decodes URL-encoded request parameters
// before passing them to the backend integration", HTTP API routes guide),
// a function URL as the client sent it: a decoded path has its "%", "?",
// "#", spaces and control characters escaped, so it reaches the handler as
// it was, but for a decoded "%" followed by two hex digits, which reads as
// an escape (nothing in the event tells the two apart).
func (l *Lambda) ProxyV2(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	if err := checkEvent(ev.RequestContext.HTTP.Method, ev.Body, ev.IsBase64Encoded); err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	if ev.RawPath == "" {
		ev.RawPath = ev.RequestContext.HTTP.Path
	}
	ev.RawPath = proxyablePath(stripStage(ev.RawPath, ev.RequestContext.Stage, ev.RequestContext.DomainName))
	ev.RawQueryString = escapeURLPart(ev.RawQueryString, queryByte)
	ev.RequestContext.DomainName = proxyableHost(ev.RequestContext.DomainName)
	req, err := l.v2.EventToRequestWithContext(ctx, ev)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, fmt.Errorf("gateway: HTTP API event to request: %w", err)
	}
	resplitQuoted(req.Header, ev.Headers)
	return serveProxy(l.h, req, core.NewProxyResponseWriterV2())
}

// stripStage returns an HTTP API's path without its first segment when that
// is the named stage of an execute-api endpoint (see ProxyV2).
func stripStage(path, stage, domain string) string {
	if stage == "" || stage == "$default" || !strings.Contains(domain, ".execute-api.") {
		return path
	}
	rest, ok := strings.CutPrefix(path, "/"+stage)
	switch {
	case !ok || rest != "" && rest[0] != '/':
		return path
	case rest == "":
		return "/"
	}
	return rest
}

// proxyWriter is the proxy's response writer of one payload version.
type proxyWriter[R any] interface {
	http.ResponseWriter
	GetProxyResponse() (R, error)
}

// serveProxy runs h on req with w held to net/http's rules (see Lambda), so that
// the proxy's writer always has one status, and returns w's proxy response.
func serveProxy[R any](h http.Handler, req *http.Request, w proxyWriter[R]) (R, error) {
	sw := &statusWriter{ResponseWriter: w}
	h.ServeHTTP(sw, req)
	if !sw.wrote {
		sw.WriteHeader(http.StatusOK)
	}
	resp, err := w.GetProxyResponse()
	if err != nil {
		return resp, fmt.Errorf("gateway: proxy response: %w", err)
	}
	return resp, nil
}

// statusWriter passes the first final status on, as net/http does, and
// drops the rest.
type statusWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *statusWriter) WriteHeader(status int) {
	if w.wrote || status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
		return // informational statuses are never the proxy response's
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap returns the proxy's writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// resplitQuoted undoes, in h, the proxy's split of an HTTP API header value
// on a comma inside a quoted string: the proxy splits every header but a few
// singletons on every comma (API Gateway joins a repeated header's values
// with commas in payload 2.0), which cuts an sf-string Idempotency-Key such
// as "a,b", or an entity tag, in two. A value holding a quote is split again
// on the commas outside quoted strings only (RFC 9110, section 5.6.1); a
// header the proxy kept whole is left alone. The proxy trims spaces only
// from the values it splits: a value holding a tab has tabs trimmed too
// (optional whitespace is spaces and tabs, RFC 9110, section 5.6.3), so
// that "\t" reaches the handler as an empty value, as " " does.
func resplitQuoted(h http.Header, headers map[string]string) {
	for k, v := range headers {
		key := textproto.CanonicalMIMEHeaderKey(k)
		switch {
		case key == "Cookie":
		case strings.Contains(v, `"`) && len(h[key]) >= 2:
			h[key] = splitList(v)
		case strings.ContainsRune(v, '\t'):
			for i, s := range h[key] {
				h[key][i] = strings.Trim(s, " \t")
			}
		}
	}
}

// splitList splits a header field value on the commas outside quoted
// strings (where a backslash escapes the next character), trimming spaces
// and tabs from each element.
func splitList(v string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			out = append(out, strings.Trim(v[start:i], " \t"))
			start = i + 1
		}
	}
	return append(out, strings.Trim(v[start:], " \t"))
}

// aws-lambda-go-api-proxy's EventToRequest turns an event into a request
// with http.NewRequest(method, "https://"+domainName+path[+"?"+query]); when
// that fails it prints the raw method and path with fmt.Printf (a client
// could forge a log line with an encoded newline) and the adapter answers
// with an error (API Gateway: 502). Everything below makes the event's URL
// parts parse, so that never happens, and the handler sees the path the
// client asked for.

// unknownHost replaces a requestContext.domainName that is not a host name.
const unknownHost = "unknown.invalid"

// checkEvent refuses what API Gateway never sends: a method that is not an
// HTTP token, a body that is not the base64 it claims to be.
func checkEvent(method, body string, base64Encoded bool) error {
	if method == "" || strings.IndexFunc(method, notToken) >= 0 {
		return fmt.Errorf("gateway: the event's method %q is not an HTTP method", method)
	}
	if base64Encoded {
		if _, err := base64.StdEncoding.DecodeString(body); err != nil {
			return fmt.Errorf("gateway: the event's body is not base64: %w", err)
		}
	}
	return nil
}

// notToken reports whether r may not appear in an HTTP token (RFC 9110).
func notToken(r rune) bool {
	return !(r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		strings.ContainsRune("!#$%&'*+-.^_`|~", r)))
}

// proxyablePath returns path with every byte that may not appear as such in
// a URL's path percent-encoded, and every valid escape left as it is: a REST
// API's path (as the client sent it, percent-encoded) passes unchanged, a
// decoded one (an HTTP API's) is encoded again.
func proxyablePath(path string) string { return escapeURLPart(path, pathByte) }

// proxyableHost returns host if it parses as the host of a URL and nothing
// more, else unknownHost.
func proxyableHost(host string) string {
	u, err := url.Parse("https://" + host + "/")
	if err != nil || u.Host != host || u.User != nil || u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return unknownHost
	}
	return host
}

// pathByte reports whether c may appear unescaped in a URL path (RFC 3986:
// unreserved, sub-delims, ":", "@" and "/").
func pathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// queryByte reports whether c may appear unescaped in a URL query.
func queryByte(c byte) bool { return pathByte(c) || c == '?' }

// escapeURLPart percent-encodes every byte of s that keep refuses, and every
// "%" that does not start a valid escape.
func escapeURLPart(s string, keep func(byte) bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
		case c != '%' && keep(c):
		default:
			if b == nil {
				b = append(make([]byte, 0, len(s)+16), s[:i]...)
			}
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		if b != nil {
			b = append(b, c)
		}
	}
	if b == nil {
		return s
	}
	return string(b)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
