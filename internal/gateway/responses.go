package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
)

// Gateway response types (the REST API's GatewayResponse responseType) of
// the answers the emulator gives itself.
const (
	ResponseUnauthorized                 = "UNAUTHORIZED"
	ResponseAccessDenied                 = "ACCESS_DENIED"
	ResponseMissingAuthenticationToken   = "MISSING_AUTHENTICATION_TOKEN"
	ResponseRequestTooLarge              = "REQUEST_TOO_LARGE"
	ResponseThrottled                    = "THROTTLED"
	ResponseAuthorizerFailure            = "AUTHORIZER_FAILURE"
	ResponseAuthorizerConfigurationError = "AUTHORIZER_CONFIGURATION_ERROR"
	ResponseIntegrationFailure           = "INTEGRATION_FAILURE"
	ResponseIntegrationTimeout           = "INTEGRATION_TIMEOUT"
	ResponseDefault4XX                   = "DEFAULT_4XX"
	ResponseDefault5XX                   = "DEFAULT_5XX"
)

// GatewayResponse is a REST API's customization of one of its own answers
// (AWS::ApiGateway::GatewayResponse; SAM's GatewayResponses property of an
// AWS::Serverless::Api).
type GatewayResponse struct {
	// StatusCode replaces the answer's status; zero keeps it.
	StatusCode int
	// Headers maps a response header to a mapping expression, as
	// gatewayresponse.header.<name> does: a static value in single quotes
	// ('application/problem+json') or a method request parameter
	// (method.request.header.X, method.request.querystring.X,
	// method.request.path.X). A header named here replaces the default one
	// of that name (Content-Type included).
	Headers map[string]string
	// Templates maps a content type to a body template. API Gateway does not
	// run these through VTL: it substitutes $context variables only (see
	// Substitute). The application/json template is used, or the only one.
	Templates map[string]string
}

// Context holds the $context values a gateway response template can use.
type Context struct {
	RequestID, ExtendedRequestID, APIID, AccountID, Stage, DomainName string
	HTTPMethod, Path, ResourcePath, ResourceID                        string
	SourceIP, UserAgent                                               string
	// ErrorMessage is $context.error.message; ErrorMessageNull makes it
	// null, as for an authorizer failure ({"message": null}).
	ErrorMessage     string
	ErrorMessageNull bool
	// ResponseType is $context.error.responseType.
	ResponseType string
}

var contextVar = regexp.MustCompile(`\$context\.[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)*`)

// Substitute renders a gateway response template: each $context variable is
// replaced by its value, nothing else is evaluated (no VTL directives, no
// $util). $context.error.messageString is the message as a JSON string, the
// quotes included ("Unauthorized"; null when the message is null): AWS
// documents it as "the quoted value of $context.error.message", and the
// emulator quotes and escapes it as JSON does, so that a template that uses
// it bare stays valid JSON. A variable the emulator does not know is
// replaced by nothing.
func Substitute(template string, c Context) string {
	return contextVar.ReplaceAllStringFunc(template, func(v string) string {
		switch strings.TrimPrefix(v, "$context.") {
		case "requestId":
			return c.RequestID
		case "extendedRequestId":
			return c.ExtendedRequestID
		case "apiId":
			return c.APIID
		case "accountId":
			return c.AccountID
		case "stage":
			return c.Stage
		case "domainName":
			return c.DomainName
		case "httpMethod":
			return c.HTTPMethod
		case "path":
			return c.Path
		case "resourcePath":
			return c.ResourcePath
		case "resourceId":
			return c.ResourceID
		case "identity.sourceIp":
			return c.SourceIP
		case "identity.userAgent":
			return c.UserAgent
		case "error.message":
			return c.ErrorMessage
		case "error.messageString":
			if c.ErrorMessageNull {
				return "null"
			}
			b, _ := json.Marshal(c.ErrorMessage) // a string always marshals
			return string(b)
		case "error.responseType":
			return c.ResponseType
		}
		return ""
	})
}

// gatewayError is one of API Gateway's own answers before customization.
type gatewayError struct {
	responseType string
	status       int
	errType      string // X-Amzn-Errortype, if any
	body         string // the default body, byte for byte
	message      string // $context.error.message
	messageNull  bool
	reason       string // for the emulator's log line
}

// Answers the emulator gives, with their default bodies.
func errUnauthorized(reason string) gatewayError {
	return gatewayError{ResponseUnauthorized, http.StatusUnauthorized, "UnauthorizedException", bodyUnauthorized, "Unauthorized", false, reason}
}

func errDenied(explicit bool) gatewayError {
	if explicit {
		return gatewayError{ResponseAccessDenied, http.StatusForbidden, "AccessDeniedException", bodyExplicitDeny,
			"User is not authorized to access this resource with an explicit deny", false, "explicit deny"}
	}
	return gatewayError{ResponseAccessDenied, http.StatusForbidden, "AccessDeniedException", bodyImplicitDeny,
		"User is not authorized to access this resource", false, "not allowed"}
}

// customized returns the customization that applies to g, as API Gateway
// picks it: the response type's own; else the type's fallback, DEFAULT_4XX
// or DEFAULT_5XX (fallback), applied with the answer's status unless it sets
// one; else none.
func (e *Emulator) customized(g gatewayError) (GatewayResponse, bool) {
	if r, ok := e.Responses[g.responseType]; ok {
		return r, true
	}
	r, ok := e.Responses[fallback(g.responseType)]
	return r, ok
}

// fallback is the gateway response a response type without one of its own
// takes: DEFAULT_5XX for the types whose default status is a 5XX, else
// DEFAULT_4XX (supported-gateway-response-types: "If the response type is
// unspecified, this response defaults to the DEFAULT_5XX type"). It goes by
// the type, not by the answer's status: Lambda's refusal of an event over its
// limit is answered 413 but is an INTEGRATION_FAILURE (default 504), which
// falls back on DEFAULT_5XX.
func fallback(responseType string) string {
	switch responseType {
	case "API_CONFIGURATION_ERROR", ResponseAuthorizerConfigurationError, ResponseAuthorizerFailure,
		ResponseIntegrationFailure, ResponseIntegrationTimeout, ResponseDefault5XX:
		return ResponseDefault5XX
	}
	return ResponseDefault4XX
}

// fail writes one of API Gateway's own answers: customized when Responses
// has a gateway response for it, else byte for byte as API Gateway's default.
func (x *exchange) fail(g gatewayError) (int, string) {
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Amzn-Requestid", x.requestID)
	if g.errType != "" {
		h.Set("X-Amzn-Errortype", g.errType)
	}
	status, body := g.status, g.body
	if r, ok := x.e.customized(g); ok {
		if r.StatusCode != 0 {
			status = r.StatusCode
		}
		for name, expr := range r.Headers {
			if v, ok := x.headerValue(expr); ok {
				h.Set(name, v)
			}
		}
		if t, ok := pickTemplate(r.Templates); ok {
			body = Substitute(t, x.context(g))
		}
	}
	x.w.WriteHeader(status)
	_, _ = io.WriteString(x.w, body)
	return status, g.reason
}

// pickTemplate returns the application/json template, or the only one.
func pickTemplate(templates map[string]string) (string, bool) {
	if t, ok := templates["application/json"]; ok {
		return t, true
	}
	if len(templates) == 1 {
		for _, t := range templates {
			return t, true
		}
	}
	return "", false
}

// headerValue evaluates a gateway response header mapping expression.
func (x *exchange) headerValue(expr string) (string, bool) {
	if len(expr) >= 2 && strings.HasPrefix(expr, "'") && strings.HasSuffix(expr, "'") {
		return expr[1 : len(expr)-1], true
	}
	if name, ok := strings.CutPrefix(expr, "method.request.header."); ok {
		v := x.r.Header.Get(name)
		return v, v != ""
	}
	if name, ok := strings.CutPrefix(expr, "method.request.querystring."); ok {
		v := x.r.URL.Query().Get(name)
		return v, v != ""
	}
	if name, ok := strings.CutPrefix(expr, "method.request.path."); ok {
		v, found := x.params[name]
		return v, found
	}
	return "", false
}

// context is the $context of the request for a gateway response template.
func (x *exchange) context(g gatewayError) Context {
	e := x.e
	return Context{
		RequestID:         x.requestID,
		ExtendedRequestID: extendedRequestID(),
		APIID:             e.apiID(),
		AccountID:         e.accountID(),
		Stage:             e.stage(),
		DomainName:        x.domain,
		HTTPMethod:        x.r.Method,
		Path:              "/" + e.stage() + x.path,
		ResourcePath:      x.route.Resource,
		ResourceID:        resourceIDOrEmpty(x.route.Resource),
		SourceIP:          sourceIP(x.r),
		UserAgent:         x.r.UserAgent(),
		ErrorMessage:      g.message,
		ErrorMessageNull:  g.messageNull,
		ResponseType:      g.responseType,
	}
}

func resourceIDOrEmpty(resource string) string {
	if resource == "" {
		return ""
	}
	return resourceID(resource)
}
