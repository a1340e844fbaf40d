package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/oncehq/once/idempotency/problem"
)

// Store persists records. Every method is one conditional write or read
// (implementations may retry a write that failed only because a concurrent
// transaction held the item, with a bounded, jittered backoff, but never a
// failed condition). Implementations return *ConflictError when a
// condition fails, wrap ErrNotFound when a record does not exist, and wrap
// ErrUnavailable when the store could not be reached or throttled after its
// own bounded retries, ErrResponseTooLarge when a record's answer is
// larger than the store can keep, and, for a caller's mistake rather than
// a lost lease, ErrStatusMismatch (Advance given a Progress whose status or
// External is not the record's) and ErrNotCompleted (Complete given a
// record that is not COMPLETED). The Middleware answers any other error
// (a misconfiguration, a bug) 500 internal_error, not 503: only
// ErrUnavailable tells a client that a retry may succeed.
type Store interface {
	// Commit writes rec (COMPLETED) and effects in one transaction, provided no
	// record for rec.Key exists or the existing one is Reclaimable at now.
	// Otherwise it returns a *ConflictError carrying the existing record. When
	// an effect's condition fails it returns a *RejectedError. Either way it
	// writes nothing.
	Commit(ctx context.Context, rec Record, effects []Effect, now time.Time) error
	// Reserve writes rec (IN_PROGRESS, or UNKNOWN when a sweeper restores an
	// abandoned External reservation) and effects (the reservation's holds)
	// in one transaction, under the same condition as Commit, and returns the
	// same errors.
	Reserve(ctx context.Context, rec Record, effects []Effect, now time.Time) error
	// Complete replaces the record held under lease (IN_PROGRESS or UNKNOWN
	// with that LeaseToken) with rec, which must be COMPLETED, and writes
	// effects, in one transaction. When the lease is no longer held it
	// returns a *ConflictError carrying the current record, or with a nil
	// Existing when the record is gone; when an effect's condition fails, a
	// *RejectedError. A rec of another status is the caller's mistake: an
	// error wrapping ErrNotCompleted, never a *ConflictError, and nothing
	// written.
	Complete(ctx context.Context, rec Record, lease string, effects []Effect) error
	// Release deletes the record held under lease (not COMPLETED) and writes
	// effects (undoing the reservation's holds) in one transaction,
	// returning the errors Complete returns.
	Release(ctx context.Context, key Key, lease string, effects []Effect) error
	// Advance moves the record held under lease with the status p.Status
	// (IN_PROGRESS or UNKNOWN), External as p.External says, and at the
	// recovery point p.From to the recovery point p (its Point, Data, lease
	// token, expiry and update time), keeping its status, and writes
	// effects, in one transaction. It returns the errors Complete returns:
	// a record at another point or under another lease (a stale view of it)
	// is a conflict too. A record held under lease at p.From but of another
	// status than p.Status, or External when p.External is not (or the
	// other way round), is the caller's mistake, not a lost lease: it
	// returns an error wrapping ErrStatusMismatch, never a *ConflictError,
	// and an invalid p.Status (see Progress.RecordStatus) another error.
	// Either way it writes nothing. Advancing an UNKNOWN record (a
	// Resolver resuming its phases) sets its UnknownSince to p.UpdatedAt:
	// the phases after p may call out again.
	Advance(ctx context.Context, key Key, lease string, p Progress, effects []Effect) error
	// MarkUnknown moves the record held under lease (not COMPLETED) to
	// UNKNOWN with the new lease token and expiry, returning a *ConflictError
	// as Complete does when the lease is no longer held. The record's
	// UnknownSince becomes now unless it has one: an UNKNOWN record
	// redriven keeps when it first went UNKNOWN (see Record.UnknownSince).
	MarkUnknown(ctx context.Context, key Key, lease, newLease string, expiresAt, now time.Time) error
	// Get returns the record for key, or an error wrapping ErrNotFound.
	Get(ctx context.Context, key Key) (Record, error)
}

// Progress is where a multi-step request stands: the fields Store.Advance
// writes.
type Progress struct {
	// From is the recovery point the record must be at: the one its writer
	// went on from ("" for none yet).
	From string
	// Point is the recovery point reached.
	Point string
	// Data is everything the phases so far recorded (not only the last one's).
	Data map[string]string
	// Added is the part of Data this step gives (the data passed to
	// Steps.Advance): keys it adds, or whose values it changes. The rest of
	// Data is carried forward from the record as it stands, and nil Added
	// (a take-over, a pause: the lease moves alone) carries all of it. A
	// store that bounds the data it keeps checks what a step adds, never
	// what earlier phases (or an earlier version) recorded, so that a
	// record holding more than the bound can still be resumed.
	Added map[string]string
	// LeaseToken is the lease token from now on (a new one when the lease is
	// taken over or given up).
	LeaseToken string
	// ExpiresAt is the new lease deadline.
	ExpiresAt time.Time
	// UpdatedAt is when the point was reached.
	UpdatedAt time.Time
	// Status is the status the record must have, which Advance keeps:
	// StatusInProgress (also when empty), or StatusUnknown for a Resolver
	// resuming an UNKNOWN record (ResumeSteps). A store may keep records
	// of the two differently: the DynamoDB store gives an UNKNOWN record no
	// TTL attribute, so that its TTL never deletes one. A record held under
	// the caller's lease at From but of the other status is the caller's
	// mistake, not a lost lease: Advance returns ErrStatusMismatch; any
	// other status is an error too (see RecordStatus).
	Status Status
	// External is the record's Record.External, which Advance keeps: a
	// store may keep External records differently (the DynamoDB store
	// gives an External reservation no TTL attribute, so that its TTL
	// never deletes a record whose request may have called out before it
	// is reconciled). A record held under the caller's lease at From that
	// is External when External is false, or the other way round, is the
	// caller's mistake: Advance returns ErrStatusMismatch.
	External bool
}

// RecordStatus returns the status the record must have for Advance:
// p.Status, or StatusInProgress when it is empty. Any status other than
// IN_PROGRESS and UNKNOWN is an error: no other record has a recovery point
// to move. Every store validates Progress with it.
func (p Progress) RecordStatus() (Status, error) {
	switch p.Status {
	case "":
		return StatusInProgress, nil
	case StatusInProgress, StatusUnknown:
		return p.Status, nil
	}
	return "", fmt.Errorf("idempotency: Progress.Status %q: a record of that status has no recovery point to move", p.Status)
}

// Errors of the contract. Callers compare them with errors.Is / errors.As;
// each answers as its problem (package problem).
var (
	// ErrKeyMissing: a POST without an Idempotency-Key header (400).
	ErrKeyMissing = problem.New(http.StatusBadRequest, "idempotency_key_missing", "Idempotency-Key missing",
		"This request needs an Idempotency-Key header: a unique value per operation, reused only to retry it.")
	// ErrKeyInvalid: the header is malformed (400); ParseKey returns a
	// *KeyError that matches it.
	ErrKeyInvalid = problem.New(http.StatusBadRequest, "idempotency_key_invalid", "Idempotency-Key invalid", keyRule+".")
	// ErrKeyReused: the key was used with another request (422).
	ErrKeyReused = problem.New(http.StatusUnprocessableEntity, "idempotency_key_reused", "Idempotency-Key reused",
		"This Idempotency-Key was already used with a different request (method, route or body). Use a new key for a new request.")
	// ErrBodyTooLarge: the request body exceeds the limit (413); the
	// middleware returns a *BodyTooLargeError that matches it.
	ErrBodyTooLarge = problem.New(http.StatusRequestEntityTooLarge, "payload_too_large", "Payload too large",
		"The request body is too large.")
	// ErrBodyInvalid: the body is not a JSON document and cannot be
	// fingerprinted (400 invalid_request, naming no field).
	ErrBodyInvalid = errBodyInvalid{}
	// ErrNumberPrecision: a number in the body has more precision than a
	// 64-bit float holds (I-JSON, RFC 7493 §2.2), so the fingerprint could
	// not tell it from a nearby one (400 invalid_request, naming no field);
	// see Canonical.
	ErrNumberPrecision = errNumberPrecision{}
	// ErrNoTenant: the request carries no tenant (the authorizer did not run)
	// (401).
	ErrNoTenant = problem.New(http.StatusUnauthorized, "unauthorized", "Unauthorized", "The request carries no authenticated tenant.")
	// ErrTenantInvalid: Config.Tenant returned a tenant outside the tenant
	// rule (ValidateTenant) (403, logged; the Middleware returns a
	// *TenantError that matches it). The authorizer accepted the caller,
	// so 401 would be wrong; the tenant the deployment derives from the
	// caller's credentials will be the same on every retry, so the answer
	// is final (a 4xx clients do not retry) while the operator, who alone
	// can fix the tenant function, gets the log line. Nothing is read or
	// written.
	ErrTenantInvalid = problem.New(http.StatusForbidden, "tenant_invalid", "Tenant invalid",
		"The tenant your credentials map to is not one this API can serve ("+tenantRule+"). Retrying will not help: how this API assigns tenants needs fixing.").Logged()
	// ErrResponseTooLarge: the handler's answer is too large for the store
	// to keep, or for the transport to deliver (Config.Deliverable, checked
	// before anything is written) (500, logged): it is never sent. Atomic and Leased requests
	// commit nothing (a Leased reservation is released); an External
	// request, which has called out, is completed with this problem as its
	// final answer, the one 5xx stored. A store returns it (wrapped) for
	// any write it can never make, the answer with the effects, or the
	// effects alone (a release's included: see Call.AddReleaseEffect).
	ErrResponseTooLarge = problem.New(http.StatusInternalServerError, "response_too_large", "Response too large",
		"The answer to this request is too large to be stored, so it cannot be sent. Retrying will not help.").Logged()
	// ErrStatusMismatch: Store.Advance found the record held under the
	// caller's lease, at Progress.From, but of another status than
	// Progress.Status, or External other than Progress.External (a store
	// result, not an answer). It is the caller's
	// mistake, never a lost lease, so it is not a *ConflictError: a
	// reconciler must fail the record (retried, alarmed), not drop it.
	ErrStatusMismatch = errors.New("idempotency: the record held under the lease has another status than Progress.Status, or another External")
	// ErrNotCompleted: Store.Complete was given a record that is not
	// COMPLETED (a store result, not an answer). It is the caller's
	// mistake, never a lost lease, so it is not a *ConflictError, and the
	// store writes nothing: a store keeps a COMPLETED record differently
	// (the DynamoDB store gives it, and its answer's chunks, the
	// retention's TTL).
	ErrNotCompleted = errors.New("idempotency: Store.Complete was given a record that is not COMPLETED")
	// ErrNotFound: no record for the key (a store result, not an answer).
	ErrNotFound = errors.New("idempotency: record not found")
	// ErrUnavailable: the store could not be reached (503, Retry-After: 1).
	ErrUnavailable = problem.New(http.StatusServiceUnavailable, "store_unavailable", "Store unavailable",
		"The data store did not answer in time. Retry with the same Idempotency-Key: the request then either runs or is replayed, never both.").
		WithHeader("Retry-After", "1")
)

// keyRule says what a valid Idempotency-Key is, for problem details.
const keyRule = "The Idempotency-Key header must be given once, as a token or a structured-field string of 1 to 255 characters in the range 0x21-0x7E"

// KeyError reports a malformed Idempotency-Key header. It matches
// ErrKeyInvalid.
type KeyError struct {
	// Reason says what is wrong, as a sentence fragment ("the key is empty").
	Reason string
}

// Error describes the problem.
func (e *KeyError) Error() string {
	return "idempotency: Idempotency-Key header is invalid: " + e.Reason
}

// Is makes errors.Is(err, ErrKeyInvalid) true.
func (e *KeyError) Is(target error) bool { return target == ErrKeyInvalid }

// Problem answers 400 idempotency_key_invalid, saying why.
func (e *KeyError) Problem() problem.Details {
	d := ErrKeyInvalid.Problem()
	d.Detail = keyRule + "; here " + e.Reason + "."
	return d
}

// BodyTooLargeError reports a request body over the limit. It matches
// ErrBodyTooLarge.
type BodyTooLargeError struct {
	// Limit is the largest body accepted, in bytes.
	Limit int64
}

// Error describes the problem.
func (e *BodyTooLargeError) Error() string {
	return fmt.Sprintf("idempotency: request body larger than %d bytes", e.Limit)
}

// Is makes errors.Is(err, ErrBodyTooLarge) true.
func (e *BodyTooLargeError) Is(target error) bool { return target == ErrBodyTooLarge }

// Problem answers 413 payload_too_large, naming the limit.
func (e *BodyTooLargeError) Problem() problem.Details {
	d := ErrBodyTooLarge.Problem()
	if e.Limit%1024 == 0 {
		d.Detail = fmt.Sprintf("The request body must be at most %d KiB.", e.Limit>>10)
	} else {
		d.Detail = fmt.Sprintf("The request body must be at most %d bytes.", e.Limit)
	}
	return d
}

type errBodyInvalid struct{}

func (errBodyInvalid) Error() string { return "idempotency: request body is not valid JSON" }

// Problem answers 400 invalid_request for the body as a whole.
func (errBodyInvalid) Problem() problem.Details {
	return problem.Details{Status: http.StatusBadRequest, Code: "invalid_request", Title: "Invalid request",
		Detail: "The body is not a JSON document.", HasField: true}
}

type errNumberPrecision struct{}

func (errNumberPrecision) Error() string {
	return "idempotency: a number in the request body has more precision than a 64-bit float"
}

// Problem answers 400 invalid_request for the body as a whole.
func (errNumberPrecision) Problem() problem.Details {
	return problem.Details{Status: http.StatusBadRequest, Code: "invalid_request", Title: "Invalid request",
		Detail: "A number in the body has more precision than a 64-bit float (I-JSON, RFC 7493): " +
			"it could not be told apart from a nearby number. Send such a number as a string.",
		HasField: true}
}

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

// Problem answers 409 idempotency_request_in_progress with Retry-After.
func (e *InProgressError) Problem() problem.Details {
	s := e.RetryAfterSeconds()
	return problem.Details{
		Status: http.StatusConflict, Code: "idempotency_request_in_progress", Title: "Request in progress",
		Detail: fmt.Sprintf("A request with this Idempotency-Key is still being processed. Retry after %d seconds.", s),
		Header: map[string]string{"Retry-After": strconv.Itoa(s)},
	}
}

// RetryAfterSeconds is RetryAfter rounded up to whole seconds, at least 1.
func (e *InProgressError) RetryAfterSeconds() int {
	s := int((e.RetryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}
