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
