package idempotency

import "fmt"

// Effect is a business write that a Store commits in the same transaction as
// a record: with the COMPLETED record (Atomic mode, Call.AddEffect), with the
// reservation (Begin's holds), with the completion of a lease
// (Call.AddEffect in Leased and External mode, Resolution.Effects) or with its
// release (Call.AddReleaseEffect, Resolution.Effects). Because the record's
// own condition is part of the same transaction, an effect happens exactly
// when its record transition does: never for a replay, never for a zombie
// that lost its lease.
//
// Each Store commits its own kinds of Effect and refuses others: the
// DynamoDB store takes dynamo.Put, dynamo.Update, dynamo.Delete and
// dynamo.Check (puts, updates, deletes and condition checks on any item of
// any table, each with its own condition); the in-memory store takes
// memory.Effect.
type Effect interface {
	// EffectTable names the table the effect writes or checks, for errors
	// and logs.
	EffectTable() string
}

// RejectedError reports that an effect's condition failed, so that nothing of
// its transaction was written. Err is the effect's business answer for that
// case (the refund exceeds what is left: a 4xx problem) or, when the effect
// declared none, an error that answers 500.
//
// The middleware answers Err and, when Err answers 4xx, stores that answer
// (a second write, on this path only): once execution has begun, a business
// outcome is final for the key and replayed like any other answer.
type RejectedError struct {
	// Index is the effect's position among the effects of the write.
	Index int
	// Table is the effect's table.
	Table string
	// Err is the business answer.
	Err error
}

// Error describes the rejection.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("idempotency: effect %d on %s rejected: %v", e.Index, e.Table, e.Err)
}

// Unwrap returns Err, so that the answer is Err's.
func (e *RejectedError) Unwrap() error { return e.Err }
