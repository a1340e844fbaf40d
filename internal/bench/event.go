package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"
)

// invoke is a Lambda handler of the api function: a proxy event in, a proxy
// response out.
type invoke func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error)

var requestIDs atomic.Int64

// proxyEvent is the REST API proxy event (payload 1.0) API Gateway sends the
// api function for a POST to path by tenant (the authorizer's context) with
// the Idempotency-Key key and body; fault, when set, asks for a crash there.
func proxyEvent(tenant, path, key, body, fault string) json.RawMessage {
	headers := map[string]string{
		"Accept":          "application/json",
		"Content-Type":    "application/json",
		"Idempotency-Key": key,
	}
	if fault != "" {
		headers["Once-Fault"] = fault
	}
	multi := make(map[string][]string, len(headers))
	for k, v := range headers {
		multi[k] = []string{v}
	}
	ev := events.APIGatewayProxyRequest{
		Resource: path, Path: path, HTTPMethod: "POST", Headers: headers, MultiValueHeaders: multi, Body: body,
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID:  fmt.Sprintf("bench-%d", requestIDs.Add(1)),
			Stage:      "prod",
			HTTPMethod: "POST",
			Authorizer: map[string]any{"principalId": tenant, "tenant": tenant},
		},
	}
	b, err := json.Marshal(ev)
	if err != nil {
		panic(err) // unreachable: the event holds strings only
	}
	return b
}

// answer is a proxy response, reduced to what the bench checks.
type answer struct {
	status   int
	replayed bool
	body     string
}

// label names the answer in a status histogram: "201", "201 replayed".
func (a answer) label() string {
	if a.replayed {
		return fmt.Sprintf("%d replayed", a.status)
	}
	return fmt.Sprint(a.status)
}

// final reports whether the answer is a request's final one (not 409, not a
// 5xx).
func (a answer) final() bool { return a.status != 409 && a.status < 500 }

func decodeAnswer(out json.RawMessage) (answer, error) {
	var r events.APIGatewayProxyResponse
	if err := json.Unmarshal(out, &r); err != nil {
		return answer{}, fmt.Errorf("bench: proxy response %.200q: %w", out, err)
	}
	a := answer{status: r.StatusCode, body: r.Body}
	for k, v := range r.Headers {
		if strings.EqualFold(k, "Idempotent-Replayed") && v == "true" {
			a.replayed = true
		}
	}
	for k, vs := range r.MultiValueHeaders {
		if strings.EqualFold(k, "Idempotent-Replayed") && len(vs) > 0 && vs[0] == "true" {
			a.replayed = true
		}
	}
	return a, nil
}
