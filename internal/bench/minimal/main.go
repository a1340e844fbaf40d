// Command minimal is the baseline of the bench's cold starts: a Lambda
// function of aws-lambda-go's runtime loop and a handler that returns its
// event, built as the functions are (make bench).
package main

import (
	"context"
	"encoding/json"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(_ context.Context, ev json.RawMessage) (json.RawMessage, error) { return ev, nil })
}
