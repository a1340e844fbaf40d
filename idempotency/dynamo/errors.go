package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Codes of a TransactionCanceledException's CancellationReasons.
const (
	reasonConditionalCheckFailed        = "ConditionalCheckFailed"
	reasonTransactionConflict           = "TransactionConflict"
	reasonThrottlingError               = "ThrottlingError"
	reasonProvisionedThroughputExceeded = "ProvisionedThroughputExceeded"
	reasonRequestLimitExceeded          = "RequestLimitExceeded"
	reasonValidationError               = "ValidationError"
)

// conflictRetry bounds the retries of a write cancelled by a concurrent
// transaction on the same item.
type conflictRetry struct {
	attempts  int           // in all, the first included
	base, max time.Duration // full jitter: rand[0, min(max, base*2^(n-1))]
}

var defaultConflictRetry = conflictRetry{attempts: 5, base: 5 * time.Millisecond, max: 50 * time.Millisecond}

// chunkRetry bounds the reads of a body's chunks that BatchGetItem left
// unprocessed (throttled, or over its 16 MB answer): AWS recommends "an
// exponential backoff algorithm" for them, as "if you retry the batch
// operation immediately, the underlying read or write requests can still
// fail due to throttling". At most 20+40+80+160 ms of waits in all.
var chunkRetry = conflictRetry{attempts: 5, base: 20 * time.Millisecond, max: 160 * time.Millisecond}

func (r conflictRetry) withDefaults() conflictRetry {
	if r.attempts <= 0 {
		r.attempts = defaultConflictRetry.attempts
	}
	if r.base <= 0 {
		r.base = defaultConflictRetry.base
	}
	if r.max < r.base {
		r.max = max(r.base, defaultConflictRetry.max)
	}
	return r
}

// delay is the backoff before attempt n+1, after n failed attempts.
func (r conflictRetry) delay(n int) time.Duration {
	ceiling := r.max
	if n-1 < 30 {
		ceiling = min(r.max, r.base<<(n-1))
	}
	return rand.N(ceiling + 1)
}

// do runs call, again while it fails only because a concurrent transaction
// held an item (which means nothing was written), up to the bounded number of
// attempts, honouring ctx between them.
func (s *Store) do(ctx context.Context, call func() error) error {
	for n := 1; ; n++ {
		err := call()
		if err == nil || n >= s.retry.attempts || !transactionConflict(err) {
			return err
		}
		if werr := wait(ctx, s.retry.delay(n)); werr != nil {
			return fmt.Errorf("%w (while backing off after: %w)", werr, err)
		}
	}
}

// wait waits d, or until ctx ends: then it returns ctx's cause.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// conditionFailed reports whether err is the failure of the record's
// condition (the single write's, or the first of a transaction's), and
// returns the ALL_OLD item DynamoDB sent with it, nil when there was none.
func conditionFailed(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) && len(canceled.CancellationReasons) > 0 &&
		aws.ToString(canceled.CancellationReasons[0].Code) == reasonConditionalCheckFailed {
		return canceled.CancellationReasons[0].Item, true
	}
	return nil, false
}

// transactionConflict reports whether err is only the cancellation of a write
// because a concurrent transaction held one of its items. A transaction that
// also failed a condition is not: retrying it cannot succeed.
func transactionConflict(err error) bool {
	var conflict *types.TransactionConflictException
	if errors.As(err, &conflict) {
		return true
	}
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) {
		return false
	}
	found := false
	for _, r := range canceled.CancellationReasons {
		switch aws.ToString(r.Code) {
		case reasonConditionalCheckFailed:
			return false
		case reasonTransactionConflict:
			found = true
		}
	}
	return found
}

// unavailable reports whether err means that DynamoDB could not serve the
// request for now, so that the client may retry later (503): throttling,
// contention, a network failure, a server error, or the caller's context
// ending, all after the SDK's (and the store's) bounded retries. Everything
// else (validation errors, a missing table, access denied) is a bug or a
// misconfiguration that a retry does not fix.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var (
		canceled   *types.TransactionCanceledException
		throughput *types.ProvisionedThroughputExceededException
		limit      *types.RequestLimitExceeded
		throttling *types.ThrottlingException
		internal   *types.InternalServerError
		conflict   *types.TransactionConflictException
		inProgress *types.TransactionInProgressException
		replicated *types.ReplicatedWriteConflictException
		quota      ratelimit.QuotaExceededError
		send       *smithyhttp.RequestSendError
		netErr     net.Error
		status     interface{ HTTPStatusCode() int }
		api        smithy.APIError
	)
	switch {
	case errors.As(err, &canceled):
		for _, r := range canceled.CancellationReasons {
			switch aws.ToString(r.Code) {
			case reasonTransactionConflict, reasonThrottlingError,
				reasonProvisionedThroughputExceeded, reasonRequestLimitExceeded:
				return true
			}
		}
		return false
	case errors.As(err, &throughput), errors.As(err, &limit), errors.As(err, &throttling),
		errors.As(err, &internal), errors.As(err, &conflict), errors.As(err, &inProgress),
		errors.As(err, &replicated), errors.As(err, &quota), errors.As(err, &send), errors.As(err, &netErr):
		return true
	case errors.As(err, &api):
		if _, ok := retry.DefaultThrottleErrorCodes[api.ErrorCode()]; ok {
			return true
		}
		if api.ErrorFault() == smithy.FaultServer {
			return true
		}
	}
	if errors.As(err, &status) {
		code := status.HTTPStatusCode()
		return code >= 500 || code == 429
	}
	return false
}
