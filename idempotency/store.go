package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store persists records. Every method is one conditional write or read
// (implementations may retry a write that failed only because a concurrent
// transaction held the item, with a bounded, jittered backoff, but never a
// failed condition). Implementations return *ConflictError when a
// condition fails, wrap ErrNotFound when a record does not exist, and wrap
// ErrUnavailable when the store could not be reached or throttled after its
// own bounded retries.
type Store interface {
	// Commit writes rec (COMPLETED) and effects in one transaction, provided no
	// record for rec.Key exists or the existing one is Reclaimable at now.
	// Otherwise it returns a *ConflictError carrying the existing record. An
	// effect whose item already exists fails the commit with an error that is
	// not a *ConflictError.
	Commit(ctx context.Context, rec Record, effects []Effect, now time.Time) error
	// Reserve writes rec (IN_PROGRESS, or UNKNOWN when a sweeper restores an
	// abandoned External reservation) under the same condition as Commit,
	// returning a *ConflictError carrying the existing record otherwise.
	Reserve(ctx context.Context, rec Record, now time.Time) error
	// Complete replaces the record held under lease (IN_PROGRESS or UNKNOWN
	// with that LeaseToken) with rec, and writes effects, in one transaction.
	// When the lease is no longer held it returns a *ConflictError carrying the
	// current record, or with a nil Existing when the record is gone.
	Complete(ctx context.Context, rec Record, lease string, effects []Effect) error
	// Release deletes the record held under lease (not COMPLETED), returning a
	// *ConflictError as Complete does when the lease is no longer held.
	Release(ctx context.Context, key Key, lease string) error
	// MarkUnknown moves the record held under lease (not COMPLETED) to
	// UNKNOWN with the new lease token and expiry, returning a *ConflictError
	// as Complete does when the lease is no longer held.
	MarkUnknown(ctx context.Context, key Key, lease, newLease string, expiresAt, now time.Time) error
	// Get returns the record for key, or an error wrapping ErrNotFound.
	Get(ctx context.Context, key Key) (Record, error)
}

// Errors of the contract. Callers map them to HTTP with errors.Is / errors.As.
var (
	// ErrKeyMissing: a POST without an Idempotency-Key header (400).
	ErrKeyMissing = errors.New("idempotency: Idempotency-Key header is missing")
	// ErrKeyInvalid: the header is malformed (400).
	ErrKeyInvalid = errors.New("idempotency: Idempotency-Key header is invalid")
	// ErrKeyReused: the key was used with another request (422).
	ErrKeyReused = errors.New("idempotency: key was used with a different request")
	// ErrBodyTooLarge: the request body exceeds the limit (413).
	ErrBodyTooLarge = errors.New("idempotency: request body too large")
	// ErrBodyInvalid: the body is not a JSON document and cannot be
	// fingerprinted (400).
	ErrBodyInvalid = errors.New("idempotency: request body is not valid JSON")
	// ErrNoTenant: the request carries no tenant (the authorizer did not run).
	ErrNoTenant = errors.New("idempotency: request has no tenant")
	// ErrNotFound: no record for the key.
	ErrNotFound = errors.New("idempotency: record not found")
	// ErrUnavailable: the store could not be reached (503).
	ErrUnavailable = errors.New("idempotency: store unavailable")
)

// ConflictError reports a failed condition together with the record that made
// it fail (DynamoDB's ALL_OLD item).
type ConflictError struct {
	// Existing is the record found, nil when there is none.
	Existing *Record
}

// Error describes the conflict.
func (e *ConflictError) Error() string {
	if e.Existing == nil {
		return "idempotency: condition failed: record is gone"
	}
	return fmt.Sprintf("idempotency: condition failed: record is %s", e.Existing.Status)
}

// InProgressError reports a request for a key whose original request is still
// running or whose outcome is being reconciled (409).
type InProgressError struct {
	// RetryAfter is how long the client should wait before retrying.
	RetryAfter time.Duration
}

// Error describes the conflict.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("idempotency: a request with this key is in progress; retry after %s", e.RetryAfter)
}

// RetryAfterSeconds is RetryAfter rounded up to whole seconds, at least 1.
func (e *InProgressError) RetryAfterSeconds() int {
	s := int((e.RetryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}
