package dynamo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/internal/bounds"
)

// DynamoDB's limits on one write, and the store's bounds derived from them.
// DynamoDB counts 1 KB as 1024 bytes and 1 MB as 1024 KB, and an item's
// size as the lengths of its attribute names and values (itemSize). The
// store checks every write against them before sending it, so that a write
// DynamoDB would refuse (a ValidationException, a 500 internal_error) is
// refused here with the answer the contract gives instead.
const (
	// maxTransactItems: "TransactWriteItems is a synchronous write
	// operation that groups up to 100 action requests."
	maxTransactItems = bounds.TransactItems
	// maxTransactSize: "The aggregate size of the items in the transaction
	// cannot exceed 4 MB."
	maxTransactSize = bounds.TransactSize
	// MaxRequest bounds the canonical request body an External record
	// keeps (Record.Request): a larger one is refused at its reservation
	// with ErrRequestTooLarge (413 payload_too_large). With MaxData and a
	// small answer it leaves the record's item within 400 KB, so that a
	// record can always be completed with the response_too_large problem.
	// 300,000 bytes.
	MaxRequest = bounds.MaxRequest
	// MaxData bounds a multi-step request's recorded data (Record.Data:
	// keys and values) to 64 KiB (65,536 bytes): Reserve refuses a reservation with more with
	// ErrDataTooLarge (not a record restored as it stood), and so
	// does Advance for a step (Progress.Added) that adds more, or takes
	// data within the bound past it. Data a record already holds past it
	// (written before the bound, or by another writer) is carried forward
	// as it stands and never checked again: a take-over or a pause moves
	// the lease whatever it holds, and a step is checked on what it adds,
	// DynamoDB's 400 KB on the record's item being the last bound (its
	// refusal is ErrDataTooLarge too, nothing written).
	MaxData = bounds.MaxData
)

// The in-memory store (idempotency/memory) refuses what these bounds
// refuse with the same errors (the same values: errors.Is matches them
// across both stores), but for what only DynamoDB knows (an item's size
// after an Update, ErrItemTooLarge) or what it cannot size (its effects).
var (
	// ErrRequestTooLarge is returned (wrapped) by a reservation whose
	// request is larger than MaxRequest. It matches
	// idempotency.ErrBodyTooLarge: the request answers 413
	// payload_too_large, and nothing is written.
	ErrRequestTooLarge = bounds.ErrRequestTooLarge
	// ErrDataTooLarge is returned (wrapped) by a write whose recovery
	// point's data is larger than MaxData, or would make the record's item
	// larger than DynamoDB's 400 KB; nothing is written.
	ErrDataTooLarge = bounds.ErrDataTooLarge
	// ErrItemTooLarge is returned (wrapped) by a write that DynamoDB
	// refused because an effect would make the item it writes larger than
	// 400 KB: what an Update makes of the item it changes is known to
	// DynamoDB only, so the store cannot refuse it beforehand. Nothing is
	// written. It matches idempotency.ErrResponseTooLarge: the write is one
	// the store can never make, and the middleware answers it as it answers
	// a write over the transaction's limits (500 response_too_large, the key
	// released, or an External record completed with that problem and
	// without the effects).
	ErrItemTooLarge = fmt.Errorf("dynamo: an effect would make its item too large for DynamoDB (over 400 KB): %w", idempotency.ErrResponseTooLarge)
)

// itemSizeExceeded is what DynamoDB's message says when a write would
// make an item larger than 400 KB: "Item size has exceeded the maximum
// allowed size" (PutItem) or "Item size to update has exceeded the maximum
// allowed size" (UpdateItem, and a transaction's ValidationError
// cancellation reason), as DynamoDB and DynamoDB Local word it.
const itemSizeExceeded = "exceeded the maximum allowed size"

// itemTooLarge reports whether err is DynamoDB's refusal of a write that
// would make an item larger than 400 KB: a ValidationException, or in a
// transaction a ValidationError cancellation reason. It returns the
// position of the item refused in its transaction (0 for a single write)
// and DynamoDB's message.
func itemTooLarge(err error) (int, string, bool) {
	tooLarge := func(msg string) bool {
		return strings.Contains(msg, "Item size") && strings.Contains(msg, itemSizeExceeded)
	}
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) {
		for i, r := range canceled.CancellationReasons {
			if aws.ToString(r.Code) == reasonValidationError && tooLarge(aws.ToString(r.Message)) {
				return i, aws.ToString(r.Message), true
			}
		}
		return 0, "", false
	}
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "ValidationException" && tooLarge(api.ErrorMessage()) {
		return 0, api.ErrorMessage(), true
	}
	return 0, "", false
}

// checkRecord refuses a reservation whose request or data the store does
// not keep.
func checkRecord(rec idempotency.Record) error { return bounds.CheckRecord(rec) }

// checkProgress refuses a step that adds more data than MaxData, or that
// takes data within MaxData past it; what the record carries forward
// beyond the bound is not the step's (see MaxData).
func checkProgress(p idempotency.Progress) error { return bounds.CheckProgress(p) }

// checkTransaction refuses a transaction over DynamoDB's limits with
// ErrTooLarge. The size of a Put is its item's; of an Update, Delete or
// Check the key and values it sends (what an Update makes of the item it
// changes is known to DynamoDB only, which refuses an item grown past 400
// KB itself: ErrItemTooLarge).
func checkTransaction(items []types.TransactWriteItem) error {
	if err := bounds.CheckItems(len(items)); err != nil {
		return err
	}
	size := 0
	for _, it := range items {
		size += transactItemSize(it)
	}
	return bounds.CheckSize(size)
}

func transactItemSize(it types.TransactWriteItem) int {
	switch {
	case it.Put != nil:
		return itemSize(it.Put.Item)
	case it.Update != nil:
		return itemSize(it.Update.Key) + itemSize(it.Update.ExpressionAttributeValues)
	case it.Delete != nil:
		return itemSize(it.Delete.Key)
	case it.ConditionCheck != nil:
		return itemSize(it.ConditionCheck.Key)
	}
	return 0
}
