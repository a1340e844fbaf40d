package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Fault points passed to Config.Hook, for crash injection in tests.
const (
	PointAfterReserve  = "after-reserve"
	PointAfterComplete = "after-complete"
)

// Outcomes recorded in an Observation.
const (
	OutcomeCreated    = "created"     // executed and stored
	OutcomeReplayed   = "replayed"    // stored response replayed
	OutcomeMismatch   = "mismatch"    // key reused with another request (422)
	OutcomeInProgress = "in_progress" // original still running or being reconciled (409)
	OutcomeStoreError = "store_error" // store unavailable (503)
	OutcomeRejected   = "rejected"    // refused before Begin (validation); nothing stored
	OutcomeInvalidKey = "invalid_key" // missing or malformed Idempotency-Key
	OutcomeReleased   = "released"    // 5xx after Begin: reservation released, nothing stored
	OutcomeUnknown    = "unknown"     // ambiguous outcome: record left UNKNOWN for reconciliation
	OutcomeFenced     = "fenced"      // lease lost before completion: response not stored
)

// Defaults for Config.
const (
	DefaultRetention         = 24 * time.Hour
	DefaultLease             = 30 * time.Second
	DefaultMaxBody           = 64 << 10
	DefaultUnknownRetryAfter = 2 * time.Second
	DefaultUnknownRedrive    = time.Minute
)

// Config configures a Middleware. Store, Tenant and OnError are required.
type Config struct {
	// Store persists records.
	Store Store
	// Tenant returns the caller's tenant, as established by the authorizer.
	Tenant func(*http.Request) (string, bool)
	// OnError writes the response for one of the package's errors
	// (ErrKeyMissing, ErrKeyInvalid, ErrKeyReused, ErrBodyTooLarge,
	// ErrBodyInvalid, ErrNoTenant, ErrUnavailable, *InProgressError) or for an
	// unexpected error.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// Retention is how long a completed record is kept (DefaultRetention).
	Retention time.Duration
	// Lease is how long a reservation is held before it counts as abandoned
	// (DefaultLease). It must exceed the longest a handler can run.
	Lease time.Duration
	// MaxBody is the largest request body accepted, in bytes (DefaultMaxBody).
	MaxBody int64
	// UnknownRetryAfter is the Retry-After given while a record is UNKNOWN
	// (DefaultUnknownRetryAfter).
	UnknownRetryAfter time.Duration
	// UnknownRedrive is how long a record may stay UNKNOWN before a retry of
	// its request announces it to the reconciler again (DefaultUnknownRedrive):
	// the reconciler may have given up on it after its bounded retries, and a
	// client that keeps retrying must still reach a final answer.
	UnknownRedrive time.Duration
	// Now returns the current time (time.Now).
	Now func() time.Time
	// Hook, if set, is called at each fault point (PointAfterReserve,
	// PointAfterComplete); a crash injector panics there.
	Hook func(ctx context.Context, point string)
}

// Middleware applies the idempotency contract to HTTP handlers.
type Middleware struct {
	cfg Config
}

// New returns a Middleware for cfg, filling in defaults.
func New(cfg Config) (*Middleware, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("idempotency: Config.Store is required"))
	}
	if cfg.Tenant == nil {
		errs = append(errs, errors.New("idempotency: Config.Tenant is required"))
	}
	if cfg.OnError == nil {
		errs = append(errs, errors.New("idempotency: Config.OnError is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.UnknownRetryAfter <= 0 {
		cfg.UnknownRetryAfter = DefaultUnknownRetryAfter
	}
	if cfg.UnknownRedrive <= 0 {
		cfg.UnknownRedrive = DefaultUnknownRedrive
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Hook == nil {
		cfg.Hook = func(context.Context, string) {}
	}
	return &Middleware{cfg: cfg}, nil
}

// Wrap makes next idempotent under mode. route names the endpoint in
// fingerprints ("POST /v1/payments"): the same key on another route is a
// different request. next must call Begin once it has validated the request
// and before it has any effect; whatever it writes before Begin is sent as is
// and not stored.
func (m *Middleware) Wrap(mode Mode, route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		obs := observationFrom(r.Context())
		obs.Route = route
		tenant, ok := m.cfg.Tenant(r)
		if !ok || tenant == "" {
			m.fail(w, r, obs, OutcomeRejected, ErrNoTenant)
			return
		}
		obs.Tenant = tenant
		raw, err := ParseKey(r.Header.Values(Header))
		if err != nil {
			m.fail(w, r, obs, OutcomeInvalidKey, err)
			return
		}
		key := NewKey(tenant, raw)
		obs.Key = key.Short()
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, m.cfg.MaxBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				m.fail(w, r, obs, OutcomeRejected, ErrBodyTooLarge)
				return
			}
			m.fail(w, r, obs, OutcomeRejected, fmt.Errorf("idempotency: read body: %w", err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))

		c := &Call{m: m, mode: mode, route: route, key: key, body: body, obs: obs}
		rec := newRecorder()
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), callKey{}, c)))
		c.finish(w, r, rec)
	})
}

// Call is one request's passage through the middleware, returned by Begin.
type Call struct {
	m           *Middleware
	mode        Mode
	route       string
	key         Key
	body        []byte
	fingerprint string
	canonical   []byte
	obs         *Observation

	begun   bool
	answer  func(http.ResponseWriter) // set when Begin decided the response
	rec     Record                    // the reservation (Leased, External)
	effects []Effect
	unknown bool
}

type callKey struct{}

// Begin marks the end of validation: from here the request counts as
// executing. In Leased and External mode it reserves the key (one store round
// trip); in Atomic mode the reservation is deferred to the commit. When it
// returns false the response is already decided (a replay, 409, 422 or 503)
// and the handler must return without effects; whatever it writes is
// discarded. Begin panics outside a handler wrapped by Middleware.Wrap.
func Begin(w http.ResponseWriter, r *http.Request) (*Call, bool) {
	c, ok := r.Context().Value(callKey{}).(*Call)
	if !ok {
		panic("idempotency: Begin called outside Middleware.Wrap")
	}
	if c.begun || c.answer != nil {
		return c, c.begun
	}
	canonical, err := Canonical(c.body)
	if err != nil {
		c.decide(OutcomeRejected, c.errorAnswer(r, ErrBodyInvalid))
		return nil, false
	}
	c.canonical = canonical
	c.fingerprint = Fingerprint(r.Method, c.route, canonical)
	if c.mode == Atomic {
		c.begun = true
		return c, true
	}

	now := c.m.cfg.Now()
	rec := Record{
		Key:         c.key,
		Status:      StatusInProgress,
		Route:       c.route,
		Fingerprint: c.fingerprint,
		External:    c.mode == External,
		LeaseToken:  NewToken(),
		ExpiresAt:   now.Add(c.m.cfg.Lease),
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	if c.mode == External {
		rec.Request = canonical
	}
	err = c.timed(func() error { return c.m.cfg.Store.Reserve(r.Context(), rec, now) })
	if err != nil {
		c.resolve(r, err, now)
		return nil, false
	}
	c.rec = rec
	c.begun = true
	c.m.cfg.Hook(r.Context(), PointAfterReserve)
	return c, true
}

// Key is the scoped idempotency key of the request.
func (c *Call) Key() Key { return c.key }

// ForwardKey is the idempotency key to send to another system for this
// request's effect there (see Key.Forward).
func (c *Call) ForwardKey() string { return c.key.Forward(c.fingerprint) }

// Record is the reservation Begin wrote (Leased and External mode): the
// record as stored, IN_PROGRESS, with its CreatedAt and, in External mode,
// the canonical Request. A response built only from it and from the outcome
// of the external call is one a reconciler can rebuild from the stored record
// later. In Atomic mode nothing is reserved and Record is the zero Record.
func (c *Call) Record() Record {
	rec := c.rec
	rec.Request = bytes.Clone(rec.Request)
	return rec
}

// AddEffect adds a write to be committed with the record (Atomic and Leased
// mode; in External mode too, with the completion).
func (c *Call) AddEffect(e Effect) { c.effects = append(c.effects, e) }

// Unknown declares the outcome ambiguous (an external call timed out after it
// may have taken effect): the record goes to UNKNOWN for reconciliation and the
// handler's response is sent but not stored. Only External mode.
func (c *Call) Unknown() { c.unknown = true }

// finish stores and sends the response once the handler has returned.
func (c *Call) finish(w http.ResponseWriter, r *http.Request, rec *recorder) {
	if c.answer != nil {
		c.answer(w)
		return
	}
	if !c.begun {
		c.obs.Outcome = OutcomeRejected
		rec.flush(w)
		return
	}
	ctx := r.Context()
	now := c.m.cfg.Now()
	switch {
	case c.mode == Atomic && rec.status >= 500:
		c.obs.Outcome = OutcomeReleased
		rec.flush(w)
	case c.mode == Atomic:
		done := c.completed(rec, now)
		err := c.timed(func() error { return c.m.cfg.Store.Commit(ctx, done, c.effects, now) })
		if err != nil {
			c.resolve(r, err, now)
			c.answer(w)
			return
		}
		c.m.cfg.Hook(ctx, PointAfterReserve)
		c.m.cfg.Hook(ctx, PointAfterComplete)
		c.obs.Outcome = OutcomeCreated
		rec.flush(w)
	case c.unknown && c.mode == External:
		err := c.timed(func() error {
			return c.m.cfg.Store.MarkUnknown(ctx, c.key, c.rec.LeaseToken, NewToken(), now.Add(c.m.cfg.Retention), now)
		})
		c.obs.Outcome = OutcomeUnknown
		if err != nil {
			c.obs.Err = err.Error()
		}
		rec.flush(w)
	case rec.status >= 500:
		err := c.timed(func() error { return c.m.cfg.Store.Release(ctx, c.key, c.rec.LeaseToken) })
		c.obs.Outcome = OutcomeReleased
		if err != nil {
			c.obs.Err = err.Error()
		}
		rec.flush(w)
	default:
		done := c.completed(rec, now)
		err := c.timed(func() error { return c.m.cfg.Store.Complete(ctx, done, c.rec.LeaseToken, c.effects) })
		reserved := true // the reservation is still there for reconciliation
		var conflict *ConflictError
		if errors.As(err, &conflict) && conflict.Existing == nil {
			reserved = false
			// The reservation was released (reconciled as "nothing happened")
			// while this request was still running. It knows the true outcome,
			// and nobody owns the key: record it unless a newer request has
			// reserved the key meanwhile.
			err = c.timed(func() error { return c.m.cfg.Store.Commit(ctx, done, c.effects, now) })
		}
		switch {
		case errors.As(err, &conflict):
			// A zombie: the lease was taken over. Its response is not stored;
			// the client gets the current state of the key instead.
			c.obs.Err = err.Error()
			if conflict.Existing != nil && conflict.Existing.Status == StatusCompleted &&
				conflict.Existing.Fingerprint == c.fingerprint && conflict.Existing.Response != nil {
				c.decide(OutcomeReplayed, replay(*conflict.Existing.Response))
			} else {
				c.decide(OutcomeFenced, c.errorAnswer(r, &InProgressError{RetryAfter: c.m.cfg.UnknownRetryAfter}))
			}
			c.answer(w)
			return
		case err != nil && c.mode == External && reserved:
			// The call out happened and the handler's answer says how it
			// ended, but it could not be recorded. Send it as it is, not
			// stored: the reservation stays, expires into reconciliation, and
			// the reconciler records the same answer from the other system.
			// (Without a reservation nothing would reconcile it; the 503
			// below sends the client back to retry instead.)
			c.obs.Outcome, c.obs.Err = OutcomeStoreError, err.Error()
			rec.flush(w)
			return
		case err != nil:
			// The completion's transaction (the effects with it) may or may
			// not have landed: a retry either replays it or, once the lease
			// has run out, executes again.
			c.decide(OutcomeStoreError, c.errorAnswer(r, fmt.Errorf("%w: %w", ErrUnavailable, err)))
			c.answer(w)
			return
		}
		c.m.cfg.Hook(ctx, PointAfterComplete)
		c.obs.Outcome = OutcomeCreated
		rec.flush(w)
	}
}

// completed is the COMPLETED record storing the handler's response. An
// External record keeps its canonical request, as the reservation had it.
func (c *Call) completed(rec *recorder, now time.Time) Record {
	return Record{
		Key:         c.key,
		Status:      StatusCompleted,
		Route:       c.route,
		Fingerprint: c.fingerprint,
		External:    c.mode == External,
		LeaseToken:  c.rec.LeaseToken,
		ExpiresAt:   now.Add(c.m.cfg.Retention),
		Request:     c.rec.Request,
		Response:    rec.response(),
		CreatedAt:   createdAt(c.rec, now),
		UpdatedAt:   now,
	}
}

func createdAt(rec Record, now time.Time) time.Time {
	if rec.CreatedAt.IsZero() {
		return now
	}
	return rec.CreatedAt
}

// resolve decides the response for a failed store write: a replay, 409, 422
// or 503.
func (c *Call) resolve(r *http.Request, err error, now time.Time) {
	var conflict *ConflictError
	if !errors.As(err, &conflict) {
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		c.obs.Err = err.Error()
		c.decide(OutcomeStoreError, c.errorAnswer(r, err))
		return
	}
	c.decideExisting(r, conflict.Existing, now, true)
}

func (c *Call) decideExisting(r *http.Request, existing *Record, now time.Time, mayAbandon bool) {
	inProgress := func(d time.Duration) {
		c.decide(OutcomeInProgress, c.errorAnswer(r, &InProgressError{RetryAfter: d}))
	}
	switch {
	case existing == nil:
		inProgress(time.Second)
	case existing.Fingerprint != c.fingerprint:
		c.decide(OutcomeMismatch, c.errorAnswer(r, ErrKeyReused))
	case existing.Status == StatusCompleted && existing.Response != nil:
		c.decide(OutcomeReplayed, replay(*existing.Response))
	case existing.Status == StatusInProgress && !existing.Expired(now):
		inProgress(existing.ExpiresAt.Sub(now))
	case mayAbandon && (existing.Status == StatusInProgress && existing.External ||
		existing.Status == StatusUnknown && !now.Before(existing.UpdatedAt.Add(c.m.cfg.UnknownRedrive))):
		// Either the owner lost its lease while calling out, so its effect is
		// unknown, or an UNKNOWN record has waited UnknownRedrive for the
		// reconciler, which may have given up on it. Hand the key to
		// reconciliation (again) rather than executing again: the new lease
		// token is a stream MODIFY to UNKNOWN that triggers the reconciler,
		// and the write's condition on the old token lets one request per
		// UnknownRedrive do it. An UNKNOWN record keeps its expiry: one that
		// can never be reconciled must still end with its retention, however
		// often it is retried.
		expires := now.Add(c.m.cfg.Retention)
		if existing.Status == StatusUnknown {
			expires = existing.ExpiresAt
		}
		err := c.timed(func() error {
			return c.m.cfg.Store.MarkUnknown(r.Context(), c.key, existing.LeaseToken, NewToken(), expires, now)
		})
		var again *ConflictError
		if errors.As(err, &again) {
			c.decideExisting(r, again.Existing, now, false)
			return
		}
		if err != nil {
			c.obs.Err = err.Error()
		}
		inProgress(c.m.cfg.UnknownRetryAfter)
	default:
		// UNKNOWN, or a record that expired between the store's check and now.
		inProgress(c.m.cfg.UnknownRetryAfter)
	}
}

func (c *Call) decide(outcome string, answer func(http.ResponseWriter)) {
	c.obs.Outcome = outcome
	c.answer = answer
}

func (c *Call) errorAnswer(r *http.Request, err error) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) { c.m.cfg.OnError(w, r, err) }
}

func (c *Call) timed(f func() error) error {
	start := time.Now()
	err := f()
	c.obs.StoreCalls++
	c.obs.StoreLatency += time.Since(start)
	return err
}

func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, obs *Observation, outcome string, err error) {
	obs.Outcome = outcome
	m.cfg.OnError(w, r, err)
}

// replay writes a stored response, marked as replayed.
func replay(resp Response) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		h := w.Header()
		for k, v := range resp.Header {
			h.Set(k, v)
		}
		h.Set(ReplayedHeader, "true")
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
	}
}

// NewToken returns a random 128-bit token in hex, used as a lease (fencing)
// token.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// RetryAfterHeader formats err's Retry-After value.
func RetryAfterHeader(err *InProgressError) string { return strconv.Itoa(err.RetryAfterSeconds()) }
