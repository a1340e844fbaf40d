package fault

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/oncehq/once/idempotency/apigw"
)

// NewLambda returns the handler to pass to lambda.Start for h: the public
// apigw adapter, which also answers an injected crash (Crash) as API Gateway
// answers for a crashed function (a REST API: 502 apigw.RESTCrashBody).
func NewLambda(h http.Handler) *apigw.Lambda {
	l := apigw.NewLambda(h)
	l.Crashed = func(v any) bool {
		_, ok := AsCrash(v)
		return ok
	}
	return l
}

// NewLambdaHandler returns NewLambda(h) as a function, for callers that
// invoke it directly.
func NewLambdaHandler(h http.Handler) func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	l := NewLambda(h)
	return func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
		return l.Invoke(ctx, payload)
	}
}
