package fault

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/oncehq/once/idempotency/apigw"
)

// NewLambdaHandler returns the function to pass to lambda.Start for h: the
// public apigw adapter, which also answers an injected crash (Crash)
// as API Gateway answers for a crashed function (500 apigw.CrashBody).
func NewLambdaHandler(h http.Handler) func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	l := apigw.NewLambda(h)
	l.Crashed = func(v any) bool {
		_, ok := AsCrash(v)
		return ok
	}
	return l.Invoke
}
