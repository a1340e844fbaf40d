package dynamo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// sdk wraps err as the SDK returns it after spending its retries.
func sdk(err error) error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "PutItem",
		Err: &retry.MaxAttemptsError{Attempt: 3, Err: err}}
}

func httpStatus(code int, err error) error {
	return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}},
		Err:      err,
	}}
}

func canceled(codes ...string) error {
	reasons := make([]types.CancellationReason, len(codes))
	for i, c := range codes {
		reasons[i].Code = aws.String(c)
	}
	return &types.TransactionCanceledException{CancellationReasons: reasons}
}

func TestUnavailable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"context canceled", &smithy.OperationError{Err: &smithy.CanceledError{Err: context.Canceled}}, true},
		{"deadline exceeded", sdk(fmt.Errorf("get: %w", context.DeadlineExceeded)), true},
		{"provisioned throughput", sdk(&types.ProvisionedThroughputExceededException{}), true},
		{"request limit", sdk(&types.RequestLimitExceeded{}), true},
		{"throttling", sdk(&types.ThrottlingException{}), true},
		{"internal server error", sdk(httpStatus(500, &types.InternalServerError{})), true},
		{"transaction conflict", sdk(&types.TransactionConflictException{}), true},
		{"transaction in progress", sdk(&types.TransactionInProgressException{}), true},
		{"replicated write conflict", sdk(&types.ReplicatedWriteConflictException{}), true},
		{"transaction throttled", sdk(canceled("None", "ThrottlingError")), true},
		{"transaction over capacity", sdk(canceled("ProvisionedThroughputExceeded", "None")), true},
		{"transaction conflict reason", sdk(canceled("TransactionConflict")), true},
		{"transaction validation", sdk(canceled("None", "ValidationError")), false},
		{"transaction condition", sdk(canceled("ConditionalCheckFailed", "None")), false},
		{"connection refused", sdk(&smithyhttp.RequestSendError{Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}), true},
		{"net timeout", sdk(&net.DNSError{Err: "i/o timeout", IsTimeout: true}), true},
		{"retry quota", errors.Join(sdk(errors.New("x")), ratelimit.QuotaExceededError{Available: 0, Requested: 5}), true},
		{"503 unmodeled", sdk(httpStatus(503, &smithy.GenericAPIError{Code: "ServiceUnavailable", Fault: smithy.FaultServer})), true},
		{"throttle code unmodeled", sdk(&smithy.GenericAPIError{Code: "ThrottlingException"}), true},
		{"bare 502", sdk(httpStatus(502, errors.New("bad gateway"))), true},
		{"resource not found", sdk(httpStatus(400, &types.ResourceNotFoundException{})), false},
		{"validation", sdk(httpStatus(400, &smithy.GenericAPIError{Code: "ValidationException", Fault: smithy.FaultClient})), false},
		{"access denied", sdk(httpStatus(403, &smithy.GenericAPIError{Code: "AccessDeniedException", Fault: smithy.FaultClient})), false},
		{"condition", sdk(&types.ConditionalCheckFailedException{}), false},
		{"item too large", sdk(&types.ItemCollectionSizeLimitExceededException{}), false},
		{"other", errors.New("boom"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unavailable(tt.err); got != tt.want {
				t.Errorf("unavailable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestTransactionConflict(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"single write", sdk(&types.TransactionConflictException{}), true},
		{"transaction", sdk(canceled("None", "TransactionConflict")), true},
		{"transaction, condition failed too", sdk(canceled("ConditionalCheckFailed", "TransactionConflict")), false},
		{"transaction, effect exists too", sdk(canceled("TransactionConflict", "ConditionalCheckFailed")), false},
		{"throttled", sdk(canceled("ThrottlingError")), false},
		{"condition", sdk(&types.ConditionalCheckFailedException{}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := transactionConflict(tt.err); got != tt.want {
				t.Errorf("transactionConflict(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestConflictRetryDelay(t *testing.T) {
	r := defaultConflictRetry
	for n := 1; n < 64; n++ {
		ceiling := min(r.max, r.base<<min(n-1, 20))
		for range 100 {
			if d := r.delay(n); d < 0 || d > ceiling {
				t.Fatalf("delay(%d) = %v, want within [0, %v]", n, d, ceiling)
			}
		}
	}
	if got, want := r.delay(1000), 50*time.Millisecond; got > want {
		t.Errorf("delay(1000) = %v, want at most %v", got, want)
	}
}

// TestItemTooLarge: DynamoDB's refusals of an item over 400 KB, in the
// words DynamoDB and DynamoDB Local use, are recognised with the position
// of the item refused; other validation errors are not.
func TestItemTooLarge(t *testing.T) {
	validation := func(msg string) error {
		return sdk(&smithy.GenericAPIError{Code: "ValidationException", Message: msg, Fault: smithy.FaultClient})
	}
	canceled := func(reasons ...types.CancellationReason) error {
		return sdk(&types.TransactionCanceledException{CancellationReasons: reasons})
	}
	reason := func(code, msg string) types.CancellationReason {
		return types.CancellationReason{Code: aws.String(code), Message: aws.String(msg)}
	}
	tests := []struct {
		name      string
		err       error
		wantIndex int
		want      bool
	}{
		{"PutItem", validation("Item size has exceeded the maximum allowed size"), 0, true},
		{"UpdateItem", validation("Item size to update has exceeded the maximum allowed size"), 0, true},
		{"transaction", canceled(reason("None", ""), reason("None", ""), reason("ValidationError", "Item size to update has exceeded the maximum allowed size")), 2, true},
		{"other validation", validation("One or more parameter values were invalid: Aggregated size of all range keys has exceeded the size limit of 1024 bytes"), 0, false},
		{"transaction, other validation", canceled(reason("ValidationError", "Number overflow. Attempting to store a number with magnitude larger than supported range")), 0, false},
		{"transaction, condition", canceled(reason("ConditionalCheckFailed", "The conditional request failed")), 0, false},
		{"not DynamoDB's", errors.New("Item size has exceeded the maximum allowed size"), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i, _, ok := itemTooLarge(tt.err)
			if ok != tt.want || (ok && i != tt.wantIndex) {
				t.Errorf("itemTooLarge(%v) = %d, %v; want %d, %v", tt.err, i, ok, tt.wantIndex, tt.want)
			}
		})
	}
}
