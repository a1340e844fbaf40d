package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// ErrUnauthorized is the authorizer's answer to a request without a Bearer
// credential. Its message must be exactly "Unauthorized": that is how a Lambda
// authorizer tells API Gateway to answer 401.
var ErrUnauthorized = errors.New("Unauthorized") //nolint:staticcheck // API Gateway matches this exact text

// ContextTenant is the authorizer context key that carries the tenant.
const ContextTenant = "tenant"

// denyPrincipal is the principalId of a Deny policy.
const denyPrincipal = "unknown"

// Lookuper finds the tenant of an API key. Lookup returns ErrUnknownKey for a
// key it does not know and any other error when it cannot tell.
type Lookuper interface {
	Lookup(ctx context.Context, apiKey string) (tenant string, err error)
}

// Authorizer is the API Gateway REQUEST authorizer.
type Authorizer struct {
	keys Lookuper
	log  *slog.Logger
}

// NewAuthorizer returns an Authorizer that finds tenants through keys and logs
// one line per decision to logger (nil discards).
func NewAuthorizer(keys Lookuper, logger *slog.Logger) *Authorizer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Authorizer{keys: keys, log: logger}
}

// Handle answers one authorization request: ErrUnauthorized without a Bearer
// credential, a Deny policy for an unknown key, an Allow policy with the
// tenant for a known one, and another error when the key cannot be checked
// (or the method ARN is malformed). It never logs the key, only a short hash.
func (a *Authorizer) Handle(ctx context.Context, req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
	resource, err := StageResource(req.MethodArn)
	if err != nil {
		a.log.ErrorContext(ctx, "authorizer: bad method ARN", "method_arn", req.MethodArn, "err", err)
		return events.APIGatewayCustomAuthorizerResponse{}, err
	}
	key, ok := BearerKey(header(req, "Authorization"))
	if !ok {
		a.log.InfoContext(ctx, "authorizer: no bearer credential", "decision", "unauthorized")
		return events.APIGatewayCustomAuthorizerResponse{}, ErrUnauthorized
	}
	short := ShortHash(key)
	tenant, err := a.keys.Lookup(ctx, key)
	switch {
	case errors.Is(err, ErrUnknownKey):
		a.log.WarnContext(ctx, "authorizer: unknown API key", "key_hash", short, "decision", "deny")
		return policy(denyPrincipal, "Deny", resource, nil), nil
	case err != nil:
		a.log.ErrorContext(ctx, "authorizer: cannot check API key", "key_hash", short, "err", err)
		return events.APIGatewayCustomAuthorizerResponse{}, fmt.Errorf("auth: authorize: %w", err)
	}
	a.log.InfoContext(ctx, "authorizer: allowed", "tenant", tenant, "key_hash", short, "decision", "allow")
	return policy(tenant, "Allow", resource, map[string]any{ContextTenant: tenant}), nil
}

func policy(principal, effect, resource string, ctx map[string]any) events.APIGatewayCustomAuthorizerResponse {
	return events.APIGatewayCustomAuthorizerResponse{
		PrincipalID: principal,
		PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{
			Version: "2012-10-17",
			Statement: []events.IAMPolicyStatement{{
				Action:   []string{"execute-api:Invoke"},
				Effect:   effect,
				Resource: []string{resource},
			}},
		},
		Context: ctx,
	}
}

// StageResource returns the execute-api ARN covering every method and path of
// the stage that methodArn belongs to:
// arn:aws:execute-api:us-east-1:123456789012:abc123/prod/POST/v1/payments
// gives arn:aws:execute-api:us-east-1:123456789012:abc123/prod/*/*. The
// partition, region, account, api id and stage must each be non-empty and
// free of IAM wildcards (* and ?), blanks and control characters: the
// policy's wildcards are its own, never ones a malformed ARN brings in.
func StageResource(methodArn string) (string, error) {
	parts := strings.SplitN(methodArn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "execute-api" {
		return "", fmt.Errorf("auth: method ARN %q is not an execute-api ARN", methodArn)
	}
	path := strings.SplitN(parts[5], "/", 3)
	if len(path) < 2 || path[0] == "" || path[1] == "" {
		return "", fmt.Errorf("auth: method ARN %q has no api id and stage", methodArn)
	}
	for _, p := range []string{parts[1], parts[3], parts[4], path[0], path[1]} {
		if !arnPart(p) {
			return "", fmt.Errorf("auth: method ARN %q has an empty partition, region or account, or a wildcard, blank or control character before its method", methodArn)
		}
	}
	return strings.Join(parts[:5], ":") + ":" + path[0] + "/" + path[1] + "/*/*", nil
}

// arnPart reports whether p is a non-empty part of an ARN of printable
// ASCII without IAM wildcards (* and ?).
func arnPart(p string) bool {
	if p == "" {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || c == '*' || c == '?' {
			return false
		}
	}
	return true
}

// BearerKey extracts the key from an Authorization header value of the form
// "Bearer <key>", the scheme matched case-insensitively. It reports false for
// any other value, including a key with spaces or control characters.
func BearerKey(authorization string) (string, bool) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key := strings.TrimLeft(rest, " ")
	if checkKey(key) != nil {
		return "", false
	}
	return key, true
}

// header returns the value of the named header, whatever its case: API
// Gateway passes header names as the client sent them. Two spellings of the
// name with different values (Authorization and authorization, say), or the
// header repeated with different values (API Gateway keeps the last in
// Headers, every one in MultiValueHeaders), are ambiguous, and which one
// API Gateway's identity source (and the authorizer cache keyed by it) read
// is not known: the header counts as absent (401), never as whichever map
// order or repetition gives first or last.
func header(req events.APIGatewayCustomAuthorizerRequestTypeRequest, name string) string {
	var value string
	found := false
	same := func(v string) bool {
		if found && v != value {
			return false
		}
		value, found = v, true
		return true
	}
	for k, v := range req.Headers {
		if strings.EqualFold(k, name) && !same(v) {
			return ""
		}
	}
	for k, vs := range req.MultiValueHeaders {
		if !strings.EqualFold(k, name) {
			continue
		}
		for _, v := range vs {
			if !same(v) {
				return ""
			}
		}
	}
	return value
}
