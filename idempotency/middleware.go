package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncehq/once/idempotency/internal/nilness"
	"github.com/oncehq/once/idempotency/problem"
)

// Fault points passed to Config.Hook, for crash injection in tests.
const (
	PointAfterReserve  = "after-reserve"
	PointAfterComplete = "after-complete"
)

// Outcomes recorded in an Observation.
const (
	OutcomeCreated    = "created"     // executed and stored
	OutcomeRefused    = "refused"     // an effect's condition refused the request: its 4xx answer is stored
	OutcomeReplayed   = "replayed"    // stored response replayed
	OutcomeMismatch   = "mismatch"    // key reused with another request (422)
	OutcomeInProgress = "in_progress" // original still running or being reconciled (409)
	OutcomeStoreError = "store_error" // a store write failed: 503 when unavailable, else 500, nothing (or only a 500) stored
	OutcomeRejected   = "rejected"    // refused before Begin (validation), or a success without Begin (500); nothing stored
	OutcomeInvalidKey = "invalid_key" // missing or malformed Idempotency-Key
	OutcomeReleased   = "released"    // 5xx after Begin: reservation released, nothing stored
	OutcomeUnknown    = "unknown"     // ambiguous outcome: record left UNKNOWN for reconciliation
	OutcomeFenced     = "fenced"      // lease lost before completion: response not stored
	OutcomeResumed    = "resumed"     // an abandoned multi-step request taken over at its recovery point
	// OutcomeEffectsDropped: an External request's answer, the 500
	// response_too_large problem, stored without the effects it should have
	// carried, because they alone are too large for one write of the store:
	// a completion's effects (the holds too, when the reservation was gone),
	// or a release's (the holds kept, never given back). The key ends, but
	// the state it left needs an operator: alarm on it.
	OutcomeEffectsDropped = "effects_dropped"
	// OutcomeInvalidTenant: Config.Tenant returned a tenant outside the
	// tenant rule (ValidateTenant): 403 tenant_invalid, nothing read or
	// stored, logged at error (the deployment's tenant function needs
	// fixing).
	OutcomeInvalidTenant = "invalid_tenant"
)

// Defaults for Config.
const (
	DefaultRetention         = 24 * time.Hour
	DefaultLease             = 30 * time.Second
	DefaultMaxBody           = 64 << 10
	DefaultUnknownRetryAfter = 2 * time.Second
	DefaultUnknownRedrive    = time.Minute
	// DefaultCompletionTimeout is above what a store's own bounded retries
	// take to finish one write (this repository's DynamoDB client: 3
	// attempts of at most 2 s; an answer of several MB is one transaction of
	// its chunks), so that it cuts only a store that hangs past them, and
	// half DefaultLease. A Config with a shorter Lease gets half its Lease
	// instead (see Config.CompletionTimeout).
	DefaultCompletionTimeout = 15 * time.Second
)

// LeaseMargin is how much longer than the time its request may still run a
// lease must be: the lease deadline is written with one host's clock and
// compared with another's (a retry's, the recovery check's), and the
// request's last write lands a little after its handler returns. The
// Middleware warns when a request's deadline leaves less (Config.Logger),
// and this repository's deploy test holds every function that runs the
// engine to it (its Timeout plus LeaseMargin under its lease).
const LeaseMargin = 2 * time.Second

// ErrRetentionShort is New's error for a Config whose Retention (after
// defaults) is shorter than its Lease: a record would expire, and count as
// absent, before a client told to wait out the lease (409 with Retry-After)
// retries, and the retry would run the request again.
var ErrRetentionShort = errors.New("idempotency: Config.Retention is shorter than Config.Lease")

// ErrUnknownRedriveLong is New's error for a Config whose UnknownRedrive is
// longer than its Retention (after defaults): an UNKNOWN record's expiry is
// a Retention from each redrive, and a retry redrives it no sooner than
// UnknownRedrive after the last, so its expiry would pass between two
// redrives while its client keeps retrying. (Its store's TTL no longer
// deletes it then, nor ever: an UNKNOWN record is never reclaimable, and
// the DynamoDB store gives it no TTL attribute. The rule keeps the expiry
// an operator lists, and a store of your own that deletes by expiry, true.)
var ErrUnknownRedriveLong = errors.New("idempotency: Config.UnknownRedrive is longer than Config.Retention")

// ErrCompletionTimeoutLong is New's error for a Config whose
// CompletionTimeout, set, is not shorter than its Lease (after defaults): a
// completion still in flight when the lease runs out lets a retry, or the
// recovery check, take the key over and execute the request again.
var ErrCompletionTimeoutLong = errors.New("idempotency: Config.CompletionTimeout is not shorter than Config.Lease")

// Config configures a Middleware. Store and Tenant are required.
type Config struct {
	// Store persists records.
	Store Store
	// Tenant returns the caller's tenant, as established by the authorizer
	// (never by anything the caller sends itself). false, or an empty
	// tenant, answers 401 (ErrNoTenant). A tenant must follow the tenant
	// rule (ValidateTenant: 1 to MaxTenantLength (1024) bytes of valid
	// UTF-8, no control character, no bidirectional control, no '#';
	// spaces and any printable Unicode are fine, so an e-mail address, an
	// org's display name or an assumed-role ARN serve as they are): one
	// that does not answers 403
	// (a *TenantError, matching ErrTenantInvalid) before anything is read
	// or written, on every retry, with the outcome OutcomeInvalidTenant,
	// which Logger gets at error with the tenant's length and a SHA-256
	// prefix, never any of its bytes. A function reading a claim that may
	// hold '#' or control characters should map it to an id that does not.
	Tenant func(*http.Request) (string, bool)
	// OnError writes the response for one of the package's errors
	// (ErrKeyMissing, a *KeyError, ErrKeyReused, a *BodyTooLargeError,
	// ErrBodyInvalid, ErrNumberPrecision, ErrNoTenant, a *TenantError,
	// ErrUnavailable, *InProgressError), for an effect's business
	// rejection (the RejectedError's Err) or for an unexpected error. The default is problem.Write, which answers each as
	// its problem (application/problem+json).
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// Retention is how long a completed record is kept (DefaultRetention),
	// and an UNKNOWN record's expiry after it went UNKNOWN or was last
	// redriven (it is kept until it is reconciled, however long: the
	// store's TTL never deletes it); at least Lease (ErrRetentionShort) and
	// at least UnknownRedrive (ErrUnknownRedriveLong): an UNKNOWN record's
	// expiry moves to a Retention from each redrive, and a shorter
	// Retention would let it pass between two. A deployment with a
	// reconciler keeps it above the reconciler's retries too.
	Retention time.Duration
	// Lease is how long a reservation is held before it counts as abandoned
	// (DefaultLease). It must exceed the longest a handler can run, by
	// LeaseMargin: on Lambda, the function's timeout. A request whose
	// context has a deadline later than that (a function timeout longer than
	// the lease) is served, but the Middleware logs a warning, once, to
	// Logger: its lease can run out while it still runs, and a retry would
	// then take its key over and execute it a second time.
	Lease time.Duration
	// CompletionTimeout bounds the writes the Middleware makes once the
	// handler has returned (DefaultCompletionTimeout): the completion with
	// the answer and its effects, a release, UNKNOWN, a multi-step request's
	// pause, and what a refused or conflicting write of those (or of an
	// Atomic commit) then calls for: a refusal's answer stored, an
	// abandoned reservation found under the key handed to reconciliation.
	// They run detached from the request's cancellation (its context's
	// values kept), so that a client hanging up or a deadline passing as
	// the work is done does not leave the key reserved until its lease runs
	// out, and its retry replays the answer rather than executing again;
	// CompletionTimeout is their own bound instead (every retry of the
	// store's included). On Lambda the invocation still ends at the
	// function's timeout whatever this says: a completion cut there is
	// recovered through the lease, which outlasts the function (Lease).
	// The handler, the reservation and an Atomic commit keep the request's
	// context. A value set must be shorter than Lease
	// (ErrCompletionTimeoutLong); unset, it is DefaultCompletionTimeout or
	// half the Lease, whichever is shorter (15s with DefaultLease, 1s with
	// a Lease of 2s), so that the default, as a value set, never outlasts
	// the lease.
	CompletionTimeout time.Duration
	// MaxBody is the largest request body accepted, in bytes (DefaultMaxBody).
	MaxBody int64
	// UnknownRetryAfter is the Retry-After given while a record is UNKNOWN
	// (DefaultUnknownRetryAfter).
	UnknownRetryAfter time.Duration
	// UnknownRedrive is how long a record may stay UNKNOWN before a retry of
	// its request announces it to the reconciler again (DefaultUnknownRedrive):
	// the reconciler may have given up on it after its bounded retries, and a
	// client that keeps retrying must still reach a final answer. A redrive
	// moves the record's expiry to at least Retention from then, so it must
	// not be longer than Retention (ErrUnknownRedriveLong). It keeps the
	// record's UnknownSince, from which the reconciler's Settle
	// (recovery.ReconcilerConfig) runs: a redrive does not put off a
	// release, so UnknownRedrive may be shorter than Settle.
	UnknownRedrive time.Duration
	// Now returns the current time (time.Now).
	Now func() time.Time
	// Hook, if set, is called at each fault point (PointAfterReserve,
	// PointAfterComplete); a crash injector panics there.
	Hook func(ctx context.Context, point string)
	// Deliverable, if set, is asked before an answer is stored whether the
	// transport serving the Middleware can deliver it, on the first answer
	// and on every replay: an error (which the Middleware makes match
	// ErrResponseTooLarge when it does not) refuses it as one over the
	// store's limits is refused, 500 response_too_large, before anything
	// is committed (Atomic and Leased: nothing committed, a Leased
	// reservation released; External, which has called out: that problem
	// stored as the final answer, with the effects). The default (nil)
	// puts no limit beyond the store's. A Middleware served by a Lambda
	// function sets apigw.Deliverable (once.Middleware does): Lambda
	// returns at most 6 MB, and an answer the store keeps (3.5 MB once
	// compressed) can be larger. It must not modify the Response.
	Deliverable func(Response) error
	// Cache, if set, keeps the COMPLETED records this Middleware sees, so that
	// replays and mismatches of them cost no store round trip (see Cache).
	// A Cache shared with other Middlewares keeps each one's entries apart.
	// Build the Middleware once (per function instance), not per request:
	// a Middleware made per request never finds an entry of another, and
	// its entries keep it in memory until they are evicted.
	Cache *Cache
	// Logger receives the Middleware's warnings about its configuration
	// (a lease shorter than a request's deadline allows) and, for a request
	// whose context carries no Observation (WithObservation: its caller
	// logs the request itself, and nothing is logged here), one line for an
	// outcome an operator must see: OutcomeEffectsDropped and an
	// OutcomeStoreError (a store error: denied access, a missing table, an
	// answer too large for the store) at Error, or at Warn when the store
	// was unavailable (503, a retry may succeed), but not a request the
	// store refused as the client's (413 payload_too_large); a success
	// answered 500 because the handler never called Begin, at Error; a
	// write after the handler that failed (a release, UNKNOWN) with
	// OutcomeReleased or OutcomeUnknown, at Warn; and a write handing an
	// abandoned record on (to reconciliation, UNKNOWN) that failed, its
	// retry answered 409 OutcomeInProgress, at Warn. The line carries the
	// route, the outcome, the status answered, the key's record ID
	// (Key.ID: the tenant and the key's hash) and the error text, never
	// the raw key or a body. The default (nil) is slog's default logger
	// once the program has set one, else JSON lines on stderr.
	Logger *slog.Logger
}

// validator is a Store that can say, before its first request, that it
// cannot work (dynamo.Store.Validate): New calls it.
type validator interface {
	Validate() error
}

// Middleware applies the idempotency contract to HTTP handlers. It is safe for
// concurrent use.
type Middleware struct {
	cfg Config

	mu        sync.Mutex
	routes    map[string]Mode
	patterns  *http.ServeMux // the routes, as patterns: ServeMux checks them
	resolvers Resolvers

	leaseWarned atomic.Bool // the lease-shorter-than-deadline warning was logged
}

// New returns a Middleware for cfg, filling in defaults. A Store that is nil,
// or an interface holding a nil pointer, is an error here rather than a
// panic at the first request, as is a Store with a Validate() error method
// that reports it misconfigured: the DynamoDB store without a client
// or a table name.
func New(cfg Config) (*Middleware, error) {
	var errs []error
	if nilness.Nil(cfg.Store) {
		errs = append(errs, errors.New("idempotency: Config.Store is required"))
	} else if v, ok := cfg.Store.(validator); ok {
		if err := v.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("idempotency: Config.Store: %w", err))
		}
	}
	if cfg.Tenant == nil {
		errs = append(errs, errors.New("idempotency: Config.Tenant is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.OnError == nil {
		cfg.OnError = problem.Write
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Retention < cfg.Lease {
		return nil, fmt.Errorf("%w: %v < %v", ErrRetentionShort, cfg.Retention, cfg.Lease)
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
	if cfg.Retention < cfg.UnknownRedrive {
		return nil, fmt.Errorf("%w: UnknownRedrive %v > Retention %v", ErrUnknownRedriveLong, cfg.UnknownRedrive, cfg.Retention)
	}
	if cfg.CompletionTimeout >= cfg.Lease {
		return nil, fmt.Errorf("%w: %v >= %v", ErrCompletionTimeoutLong, cfg.CompletionTimeout, cfg.Lease)
	}
	if cfg.CompletionTimeout <= 0 {
		cfg.CompletionTimeout = min(DefaultCompletionTimeout, cfg.Lease/2)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Hook == nil {
		cfg.Hook = func(context.Context, string) {}
	}
	return &Middleware{cfg: cfg, routes: map[string]Mode{}, patterns: http.NewServeMux(), resolvers: Resolvers{}}, nil
}

// Atomic makes next idempotent in Atomic mode: its effects are DynamoDB
// writes (Call.AddEffect) committed in one transaction with the stored
// answer, so every outcome costs one store round trip. It checks route as
// Wrap does.
func (m *Middleware) Atomic(route string, next http.Handler) http.Handler {
	return m.Wrap(Atomic, route, next)
}

// Leased makes next idempotent in Leased mode: Begin reserves the key under a
// lease, and the answer and the effects are stored fenced on the lease token.
// An abandoned reservation is released, so next must have no effect outside
// its effects. It checks route as Wrap does.
func (m *Middleware) Leased(route string, next http.Handler) http.Handler {
	return m.Wrap(Leased, route, next)
}

// External makes next idempotent in External mode, for a handler that calls
// another system (with Call.ForwardKey as that system's idempotency key): as
// Leased, but an outcome that is unknown (Call.Unknown) or a reservation that
// is abandoned goes to UNKNOWN, and the reconciler asks resolver what
// happened instead of executing again. It panics when resolver is nil (a nil
// ResolverFunc or pointer included): an External route without a way to
// reconcile it must fail at start-up, not when its first request times out.
// It checks route as Wrap does.
func (m *Middleware) External(route string, next http.Handler, resolver Resolver) http.Handler {
	if nilness.Nil(resolver) {
		panic(fmt.Sprintf("idempotency: External route %q needs a Resolver", route))
	}
	h := m.wrap(External, route, next)
	m.mu.Lock()
	m.resolvers[route] = resolver
	m.mu.Unlock()
	return h
}

// Wrap makes next idempotent under mode (Atomic or Leased; External routes
// need a Resolver and are wrapped with External). route names the endpoint in
// fingerprints ("POST /v1/payments"): the same key sent to another route
// is another request under that key, refused 422 idempotency_key_reused
// (ErrKeyReused) once the key is taken, as the same key with another body
// is. A route that can match more than one path also fingerprints what of
// the path it leaves open, so the same key on another resource is refused
// the same way: a route with wildcards, in ServeMux
// pattern syntax ("POST /v1/payments/{id}/capture"), what they matched (the
// path values when a ServeMux routed the request by that very pattern, else
// the escaped path); a subtree route, ending in "/" ("POST /v1/notes/",
// "/"), which matches every path under it, the escaped path. A route that
// has neither (a "{$}" is a wildcard here) fingerprints nothing of it. The body is fingerprinted in its RFC 8785 canonical form; an
// empty body (a POST without one) is a body of its own, not an error.
// next must call Begin once it has validated the request and before it has
// any effect; whatever it writes before Begin is sent as is and not stored,
// but for a success (a status below 300, or nothing written) without Begin:
// a forgotten Begin, whose work was done outside the contract, is answered
// 500 internal_error instead, Observation.Err saying why. The answer is the
// handler's first final status: an informational one it writes first (103
// Early Hints) is dropped, neither sent nor stored, so that a replay sends
// what the first answer sent.
//
// A handler that panics has no answer, and the Middleware does not recover
// the panic: nothing is stored, nor any effect added. In Atomic mode nothing
// was written before the commit, so a retry executes at once. After a
// Leased or External Begin the reservation stays IN_PROGRESS until its lease
// (Config.Lease) runs out, as a crashed process's does: under net/http,
// which recovers the panic and drops the connection, a retry within the
// lease gets 409 with Retry-After; after it, a Leased retry takes the key
// over and executes, and an External one, whose call out may have landed,
// hands the record to the reconciler (UNKNOWN) and gets 409 until it is
// resolved. A handler that recovers its own panics and answers 5xx
// releases the key at once instead (or, after a call out that may have
// landed, declares it with Call.Unknown).
//
// Wrap, as Atomic, Leased and External, checks route when it is called, at
// start-up, and panics as ServeMux.Handle does, the message naming the route
// and what is wrong with it: empty; not a ServeMux pattern of the form
// "METHOD /path" or "/path" (no host); not written with single spaces
// ("POST  /v1/notes", a trailing blank: the route is the records' and the
// resolvers' name for the endpoint, so it has one spelling); wrapped before;
// or in conflict with a route wrapped before (matching the same requests, as
// "POST /v1/notes/{id}" and "POST /v1/notes/{note}" do). A nil next (a nil
// HandlerFunc or pointer included) panics too.
func (m *Middleware) Wrap(mode Mode, route string, next http.Handler) http.Handler {
	if mode == External {
		panic(fmt.Sprintf("idempotency: wrap External route %q with Middleware.External, which takes its Resolver", route))
	}
	return m.wrap(mode, route, next)
}

// Resolvers returns the resolvers of the External routes wrapped so far.
func (m *Middleware) Resolvers() Resolvers {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.resolvers)
}

// Routes returns the routes wrapped so far and their modes.
func (m *Middleware) Routes() map[string]Mode {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.routes)
}

func (m *Middleware) wrap(mode Mode, route string, next http.Handler) http.Handler {
	if mode != Atomic && mode != Leased && mode != External {
		panic(fmt.Sprintf("idempotency: route %q: invalid mode %d", route, mode))
	}
	if nilness.Nil(next) {
		panic(fmt.Sprintf("idempotency: route %q: the handler is nil", route))
	}
	if err := m.addRoute(mode, route); err != nil {
		panic(err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		obs, observed := observationFrom(r.Context())
		if observed {
			m.serve(mode, route, next, w, r, obs)
			return
		}
		// Nobody logs the request: the Middleware logs what an operator
		// must see itself (see Config.Logger).
		sw := &statusWriter{ResponseWriter: w}
		key := m.serve(mode, route, next, sw, r, obs)
		m.report(r.Context(), obs, sw.status, key)
	})
}

// serve runs one request through the middleware, reporting into obs, and
// returns its scoped key (the zero Key when it has none).
func (m *Middleware) serve(mode Mode, route string, next http.Handler, w http.ResponseWriter, r *http.Request, obs *Observation) Key {
	obs.Route = route
	tenant, ok := m.cfg.Tenant(r)
	if !ok || tenant == "" {
		m.fail(w, r, obs, OutcomeRejected, ErrNoTenant)
		return Key{}
	}
	if err := ValidateTenant(tenant); err != nil {
		// The deployment's tenant function is at fault: refused before
		// anything is read or written, logged without any of its bytes.
		obs.Err = err.Error()
		m.fail(w, r, obs, OutcomeInvalidTenant, err)
		return Key{}
	}
	obs.Tenant = tenant
	raw, err := ParseKey(r.Header.Values(Header))
	if err != nil {
		m.fail(w, r, obs, OutcomeInvalidKey, err)
		return Key{}
	}
	key := NewKey(tenant, raw)
	obs.Key = key.Short()
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, m.cfg.MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			m.fail(w, r, obs, OutcomeRejected, &BodyTooLargeError{Limit: m.cfg.MaxBody})
			return key
		}
		m.fail(w, r, obs, OutcomeRejected, fmt.Errorf("idempotency: read body: %w", err))
		return key
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	c := &Call{m: m, mode: mode, route: route, key: key, body: body, obs: obs}
	rec := newRecorder()
	next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), callKey{}, c)))
	c.finish(w, r, rec)
	return key
}

// addRoute records route under mode, or says why it cannot be one.
func (m *Middleware) addRoute(mode Mode, route string) error {
	switch {
	case route == "":
		return errors.New(`idempotency: the route is empty: name the endpoint as its ServeMux pattern, "POST /v1/notes"`)
	case route != strings.Join(strings.Fields(route), " "):
		return fmt.Errorf(`idempotency: route %q: write it with single spaces and no blanks around it, as "POST /v1/notes"`, route)
	}
	if f := strings.Fields(route); len(f) > 2 || !strings.HasPrefix(f[len(f)-1], "/") {
		return fmt.Errorf(`idempotency: route %q: want "METHOD /path" or "/path", as "POST /v1/notes"`, route)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.routes[route]; dup {
		return fmt.Errorf("idempotency: route %q is wrapped twice", route)
	}
	if err := handle(m.patterns, route); err != nil {
		return fmt.Errorf("idempotency: route %q: %w", route, err)
	}
	m.routes[route] = mode
	return nil
}

// handle registers pattern on mux, returning as an error what ServeMux.Handle
// panics with: a pattern it cannot parse, or one that conflicts with a
// pattern registered before.
func handle(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			msg := fmt.Sprint(v)
			if i := strings.LastIndexByte(msg, '\n'); i >= 0 { // a conflict: its last line says with what
				msg = "conflicts with a route wrapped before: " + msg[i+1:]
			}
			err = errors.New(msg)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
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

	begun          bool
	answer         func(http.ResponseWriter) // set when the response is decided
	rec            Record                    // the reservation (Leased, External)
	holds          []Effect                  // written with the reservation
	effects        []Effect                  // written with the completion
	releaseEffects []Effect                  // written with a release
	unknown        bool

	// Multi-step requests (BeginAt).
	phased     bool
	startPoint string            // the first recovery point, written with the reservation
	startData  map[string]string // its data
	steps      *Steps
	finalPoint string // the point the completion reaches (Finish)
}

type callKey struct{}

// Begin marks the end of validation: from here the request counts as
// executing. In Leased and External mode it reserves the key (one store round
// trip) and writes holds with the reservation, in the same transaction: what
// the request takes before it calls out (the amount a refund will take), so
// that concurrent requests under other keys see it taken. In Atomic mode the
// reservation is deferred to the commit, and holds join its effects.
//
// When Begin returns false the response is already decided and the handler
// must return without effects; whatever it writes is discarded. That is a
// replay, 409, 422 or 503, or the business answer of a hold whose condition
// failed (a *RejectedError's Err), stored when it is a 4xx.
//
// Holds need a way back: in External mode the route's Resolver returns the
// effects that undo them when the request turns out to have had no effect,
// and Call.AddReleaseEffect gives them for a release by the handler itself
// (a 5xx). A 4xx the handler answers after Begin is a completion, stored like
// a 2xx: when it means that nothing was taken after all (the other system
// refused), the handler gives the holds back with AddEffect.
// Leased mode has no Resolver, so Begin panics there when given holds, as it
// does outside a handler wrapped by the Middleware.
func Begin(w http.ResponseWriter, r *http.Request, holds ...Effect) (*Call, bool) {
	c := callOf(r)
	if c.begun || c.answer != nil {
		return c, c.begun
	}
	return c.begin(r, holds)
}

// BeginAt is Begin for a multi-step request, in External mode: the
// reservation records the first recovery point and its data with the holds
// (the first phase's effects: an order created with the reservation), and
// the handler goes on through Call.Steps. A request that finds its key's
// reservation abandoned at a recovery point (the same request, its lease run
// out: a crash, or a 5xx that gave the lease up) takes the lease over,
// fenced on the old lease token, and gets the call back at that point with
// what the committed phases recorded; it does not write point, data and
// holds again, and must go on from Steps.Point. BeginAt panics outside an
// External route's handler.
func BeginAt(w http.ResponseWriter, r *http.Request, point string, data map[string]string, holds ...Effect) (*Call, bool) {
	c := callOf(r)
	if c.mode != External {
		panic(fmt.Sprintf("idempotency: route %q: BeginAt needs External mode", c.route))
	}
	if point == "" {
		panic(fmt.Sprintf("idempotency: route %q: BeginAt with an empty recovery point", c.route))
	}
	if c.begun || c.answer != nil {
		return c, c.begun
	}
	c.phased, c.startPoint, c.startData = true, point, maps.Clone(data)
	return c.begin(r, holds)
}

func callOf(r *http.Request) *Call {
	c, ok := r.Context().Value(callKey{}).(*Call)
	if !ok {
		panic("idempotency: Begin called outside a Middleware's handler")
	}
	return c
}

func (c *Call) begin(r *http.Request, holds []Effect) (*Call, bool) {
	if c.mode == Leased && len(holds) > 0 {
		panic(fmt.Sprintf("idempotency: route %q: holds need Atomic or External mode", c.route))
	}
	canonical, err := canonicalBody(c.body)
	if err != nil {
		var invalid error = ErrBodyInvalid
		if errors.Is(err, ErrNumberPrecision) {
			invalid = ErrNumberPrecision
		}
		c.decide(OutcomeRejected, c.errorAnswer(r, invalid))
		return nil, false
	}
	c.canonical = canonical
	c.fingerprint = fingerprintAt(r.Method, c.route, pathPart(c.route, r), canonical)
	c.holds = holds
	if cached, ok := c.m.cfg.Cache.get(c.m, c.key, c.m.cfg.Now()); ok {
		c.obs.CacheHit = true
		c.decideExisting(r.Context(), r, &cached, c.m.cfg.Now(), false)
		return nil, false
	}
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
	if c.phased {
		rec.Point, rec.Data = c.startPoint, c.startData
	}
	err = c.timed(func() error { return c.m.cfg.Store.Reserve(r.Context(), rec, holds, now) })
	var rejected *RejectedError
	switch {
	case errors.As(err, &rejected):
		c.refuse(r.Context(), r, rejected, now)
		return nil, false
	case err != nil:
		c.resolve(r.Context(), r, err, now)
		if !c.begun {
			return nil, false
		}
		c.checkLease(r.Context())
		return c, true // an abandoned multi-step request taken over
	}
	c.hold(rec)
	c.checkLease(r.Context())
	c.m.cfg.Hook(r.Context(), PointAfterReserve)
	if c.phased {
		c.m.cfg.Hook(r.Context(), PointAfter(rec.Point))
	}
	return c, true
}

// checkLease warns, once per Middleware, when ctx, the request's, has a
// deadline later than the lease just taken allows (by LeaseMargin): the
// lease can run out while the handler still runs, and a retry would then
// take the key over and execute the request a second time (fenced: only
// one of them stores its answer, but both did their work). The request is
// served all the same: refusing every request of a function whose timeout
// outgrew its lease would turn a configuration risk into an outage.
func (c *Call) checkLease(ctx context.Context) {
	deadline, ok := ctx.Deadline()
	if !ok || c.m.leaseWarned.Load() {
		return
	}
	left := time.Until(deadline)
	if left+LeaseMargin <= c.m.cfg.Lease || c.m.leaseWarned.Swap(true) {
		return
	}
	c.m.logger().WarnContext(ctx, "idempotency: the request may run longer than its lease; raise Config.Lease above the function's timeout",
		slog.String("route", c.route),
		slog.String("lease", c.m.cfg.Lease.String()),
		slog.String("deadline_in", left.Round(time.Millisecond).String()),
		slog.String("lease_margin", LeaseMargin.String()))
}

// logger is Config.Logger, or defaultLogger when it is nil: resolved when a
// line is due, as the program may set slog's default after New.
func (m *Middleware) logger() *slog.Logger {
	if m.cfg.Logger != nil {
		return m.cfg.Logger
	}
	return defaultLogger()
}

// defaultLogger is slog's default logger once the program has set one,
// else a JSON logger on stderr: slog's built-in default writes text lines
// through package log.
func defaultLogger() *slog.Logger {
	l := slog.Default()
	if fmt.Sprintf("%T", l.Handler()) == "*slog.defaultHandler" {
		return slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return l
}

// hold makes rec, as stored, the call's reservation.
func (c *Call) hold(rec Record) {
	c.rec = rec
	c.begun = true
	if c.phased {
		c.steps = &Steps{
			store: c.m.cfg.Store, key: c.key, rec: cloneRecord(rec), now: c.m.cfg.Now,
			renew: func(now time.Time) time.Time { return now.Add(c.m.cfg.Lease) },
			hook:  c.m.cfg.Hook,
			timed: c.timed,
		}
	}
}

// Steps is the way through the recovery points of a request begun with
// BeginAt (nil otherwise).
func (c *Call) Steps() *Steps { return c.steps }

// Finish names the recovery point the completion of a multi-step request
// reaches (its last phase: the answer stored, with the effects added by
// AddEffect). It is recorded on the completed record, and the fault point
// PointAfter(point) follows the completion.
func (c *Call) Finish(point string) { c.finalPoint = point }

// KeyOf returns the scoped idempotency key of r, a request inside a handler
// wrapped by a Middleware, before Begin as after: what a handler names the
// holds it passes to Begin by (a refund's hold on a payment), so that the
// route's Resolver, which gets the Record, names them the same
// (Record.Key). It is false outside such a handler.
func KeyOf(r *http.Request) (Key, bool) {
	c, ok := r.Context().Value(callKey{}).(*Call)
	if !ok {
		return Key{}, false
	}
	return c.key, true
}

// Key is the scoped idempotency key of the request.
func (c *Call) Key() Key { return c.key }

// ForwardKey is the idempotency key to send to another system for this
// request's effect there (see Key.Forward).
func (c *Call) ForwardKey() string { return c.key.Forward(c.fingerprint) }

// Record is the reservation Begin wrote (Leased and External mode): the
// record as stored, IN_PROGRESS, with its CreatedAt and, in External mode,
// the canonical Request. A response built only from it and from the outcome
// of the external call is one a Resolver can rebuild from the stored record
// later. In Atomic mode nothing is reserved and Record is the zero Record.
func (c *Call) Record() Record {
	rec := c.rec
	rec.Request = bytes.Clone(rec.Request)
	return rec
}

// AddEffect adds a write to be committed with the record: with the commit in
// Atomic mode, with the completion in Leased and External mode.
func (c *Call) AddEffect(e Effect) { c.effects = append(c.effects, e) }

// AddReleaseEffect adds a write to be committed if the reservation is
// released instead (the handler answers 5xx: nothing happened), undoing what
// Begin's holds took. Only External mode has holds to undo. Release effects
// that no write of the store can carry are not written at all: the request
// answers 500 response_too_large, and the key is released without them
// (Leased) or completed with that problem, the holds kept (External).
func (c *Call) AddReleaseEffect(e Effect) { c.releaseEffects = append(c.releaseEffects, e) }

// Unknown declares the outcome ambiguous (an external call timed out after it
// may have taken effect): the record goes to UNKNOWN for reconciliation and the
// handler's response is sent but not stored. Only External mode: elsewhere
// it panics, naming the route, as BeginAt does (a Leased or Atomic handler
// has no outcome it cannot know, and no Resolver to find it out, so an
// Unknown there is a programming error, not a call to ignore). A multi-step
// request (BeginAt) stays instead IN_PROGRESS at its last recovery point
// under its running lease, as the call may still land: once the lease has run
// out, a retry of the request takes it over there, or the lease check
// (idempotency/recovery) moves it to UNKNOWN for the route's Resolver; a retry
// within the lease gets 409.
//
// Call it when the other system's answer leaves open whether the call took
// effect: the call's own timeout (give it one, shorter than the function's),
// a transport error (a refused or dropped connection after the request may
// have been sent), a 500, 502 or 504 from the other system. An answer that
// is definite is answered instead, without Unknown: a refusal that says
// nothing was done and a retry may succeed (a 503, a 429) with a 5xx, which
// is not stored, so the key is released and a retry calls again; a refusal
// that is the request's final answer (declined, invalid at the other
// system) with a 4xx, stored and replayed. See
// ExampleMiddleware_External_unknownOutcome.
func (c *Call) Unknown() {
	if c.mode != External {
		panic(fmt.Sprintf("idempotency: route %q: Unknown needs External mode", c.route))
	}
	c.unknown = true
}

// finish stores and sends the response once the handler has returned.
func (c *Call) finish(w http.ResponseWriter, r *http.Request, rec *recorder) {
	if c.answer != nil {
		c.answer(w)
		return
	}
	if !c.begun {
		if status := rec.statusOrOK(); status < 300 {
			// A success without Begin: the handler did its work outside
			// the contract (nothing reserved, nothing stored, so a retry
			// would do it again). A forgotten Begin must not pass for an
			// idempotent endpoint: answer 500 instead, and say why.
			c.obs.Err = fmt.Sprintf("idempotency: route %q answered %d without calling Begin", c.route, status)
			c.decide(OutcomeRejected, c.errorAnswer(r, errors.New(c.obs.Err)))
			c.answer(w)
			return
		}
		c.obs.Outcome = OutcomeRejected
		rec.flush(w)
		return
	}
	if c.steps != nil && c.steps.lost != nil {
		// A phase found the lease lost and the handler stopped: nothing it
		// wrote is the key's answer, and nothing is stored (a completion
		// could only fail, or, with the record gone, commit an answer the
		// handler never gave). Answer from the store's state instead.
		c.obs.Err = c.steps.lost.Error()
		c.decideExisting(r.Context(), r, c.steps.lost.Existing, c.m.cfg.Now(), false)
		c.answer(w)
		return
	}
	ctx := r.Context()
	if c.mode != Atomic {
		// The handler has run: what it did outside the store is done, so
		// how it ended is written whatever happens to the request now (a
		// client gone, a deadline passed), under a bound of its own. Not
		// in Atomic mode: there the commit is the reservation and the
		// effects in one transaction, nothing happened before it, and a
		// request that ends first writes nothing (its retry executes).
		var cancel context.CancelFunc
		ctx, cancel = c.m.detach(ctx)
		defer cancel()
	}
	now := c.m.cfg.Now()
	switch {
	case c.mode == Atomic && rec.status >= 500:
		c.obs.Outcome = OutcomeReleased
		rec.flush(w)
	case c.mode == Atomic:
		done := c.completed(rec.response(), now)
		err := c.deliverable(rec, done.Response)
		if err == nil {
			err = c.timed(func() error { return c.m.cfg.Store.Commit(ctx, done, c.commitEffects(), now) })
		}
		if err != nil {
			// The commit has decided the request: what follows it (its
			// refusal stored, an abandoned reservation under the key
			// handed to reconciliation) is written detached, as the
			// other modes' writes after the handler are.
			wctx, cancel := c.m.detach(ctx)
			defer cancel()
			var rejected *RejectedError
			if errors.As(err, &rejected) {
				c.refuse(wctx, r, rejected, now)
			} else {
				c.resolve(wctx, r, err, now)
			}
			c.answer(w)
			return
		}
		c.m.cfg.Cache.put(c.m, done)
		c.m.cfg.Hook(ctx, PointAfterReserve)
		c.m.cfg.Hook(ctx, PointAfterComplete)
		c.obs.Outcome = OutcomeCreated
		rec.flush(w)
	case c.phased && (c.unknown || rec.status >= 500):
		c.pause(ctx, rec, now)
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
		c.release(ctx, w, r, rec, now)
	default:
		c.complete(ctx, w, r, rec, now)
	}
}

// release gives the reservation of a request that answered 5xx (nothing
// happened) up, with its release effects, and sends the answer. Release
// effects that no write of the store can carry (ErrResponseTooLarge: over
// its limits on one write, or growing an item past them) must neither keep
// the key reserved until its lease runs out nor be half-written: none is
// written, the key ends all the same, and the client gets the
// response_too_large problem, the observation saying what was not written.
// Leased mode, which holds nothing, releases the key without them, so that
// a retry executes again. External mode's release effects give the holds
// back; releasing without them would let a retry take the holds a second
// time, so the record is completed with that problem instead, the holds
// kept, as a completion whose effects alone are too large is. ctx is the
// writes' context.
func (c *Call) release(ctx context.Context, w http.ResponseWriter, r *http.Request, rec *recorder, now time.Time) {
	err := c.timed(func() error { return c.m.cfg.Store.Release(ctx, c.key, c.rec.LeaseToken, c.releaseEffects) })
	if !errors.Is(err, ErrResponseTooLarge) {
		c.obs.Outcome = OutcomeReleased
		if err != nil {
			c.obs.Err = err.Error()
		}
		rec.flush(w)
		return
	}
	c.obs.Err = err.Error() + "; the release effects alone are too large for the store: "
	answer := c.errorAnswer(r, ErrResponseTooLarge)
	if c.mode == External {
		c.obs.Err += "the response_too_large problem recorded without them (the holds kept); they are not written"
		small := c.render(r, ErrResponseTooLarge)
		done := c.completed(&small, now)
		err = c.timed(func() error { return c.m.cfg.Store.Complete(ctx, done, c.rec.LeaseToken, nil) })
		if err == nil {
			// The answer its retries replay, sent as stored (as
			// complete sends a substituted answer), the holds kept
			// for good: an operator's to give back.
			c.m.cfg.Cache.put(c.m, done)
			c.decide(OutcomeEffectsDropped, replayAs(small, false))
			c.answer(w)
			return
		}
	} else {
		c.obs.Err += "released without them; they are not written"
		err = c.timed(func() error { return c.m.cfg.Store.Release(ctx, c.key, c.rec.LeaseToken, nil) })
	}
	if err != nil {
		c.obs.Err += "; then: " + err.Error()
	}
	c.decide(OutcomeStoreError, answer)
	c.answer(w)
}

// deliverable is Config.Deliverable's verdict on resp, the handler's
// answer about to be stored, and on the answer as rec sends it the first
// time (with the fields the store does not keep, a Date the handler set,
// and each spelling of a name it set twice): nil, or an error matching
// ErrResponseTooLarge, so that an answer the transport cannot deliver,
// first or replayed, is refused as one the store cannot keep, before
// anything is written.
func (c *Call) deliverable(rec *recorder, resp *Response) error {
	if c.m.cfg.Deliverable == nil {
		return nil
	}
	err := c.m.cfg.Deliverable(*resp)
	if err == nil {
		err = c.m.cfg.Deliverable(*rec.sent())
	}
	if err == nil || errors.Is(err, ErrResponseTooLarge) {
		return err
	}
	return fmt.Errorf("%w: Config.Deliverable: %w", ErrResponseTooLarge, err)
}

// detach returns the context of the writes made once the handler has
// returned: ctx's values without its cancellation or deadline, bounded by
// CompletionTimeout.
func (m *Middleware) detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CompletionTimeout)
}

// complete stores the handler's answer fenced on the lease (Leased and
// External mode) and sends it, or the answer the store's state calls for.
// ctx is the writes' (detached from the request's cancellation).
func (c *Call) complete(ctx context.Context, w http.ResponseWriter, r *http.Request, rec *recorder, now time.Time) {
	reserved := true // the reservation is still there for reconciliation
	effects := true  // the effects go with the answer
	write := func(done Record) error {
		completion, commit := c.effects, c.commitEffects()
		if !effects {
			completion, commit = nil, nil
		}
		if reserved {
			err := c.timed(func() error { return c.m.cfg.Store.Complete(ctx, done, c.rec.LeaseToken, completion) })
			var conflict *ConflictError
			if !errors.As(err, &conflict) || conflict.Existing != nil {
				return err
			}
			// The reservation was released (reconciled as "nothing
			// happened", its holds undone) while this request was still
			// running. It knows the true outcome, and nobody owns the key:
			// record it, holds included again, unless a newer request has
			// reserved the key meanwhile.
			reserved = false
		}
		return c.timed(func() error { return c.m.cfg.Store.Commit(ctx, done, commit, now) })
	}
	done := c.completed(rec.response(), now)
	send, substituted := rec.flush, false
	err := c.deliverable(rec, done.Response)
	if err == nil {
		err = write(done)
	}
	if errors.Is(err, ErrResponseTooLarge) {
		c.obs.Err = err.Error()
		if c.mode != External {
			// Nothing happened outside the store: give the key up, so
			// that a retry executes again rather than finding it held,
			// without the release effects when they are too large too
			// (Leased mode holds nothing: see release).
			if reserved {
				err := c.timed(func() error { return c.m.cfg.Store.Release(ctx, c.key, c.rec.LeaseToken, c.releaseEffects) })
				if errors.Is(err, ErrResponseTooLarge) {
					c.obs.Err += "; the release effects alone are too large for the store: released without them; they are not written"
					err = c.timed(func() error { return c.m.cfg.Store.Release(ctx, c.key, c.rec.LeaseToken, nil) })
				}
				if err != nil {
					c.obs.Err += "; release: " + err.Error()
				}
			}
			c.decide(OutcomeStoreError, c.errorAnswer(r, ErrResponseTooLarge))
			c.answer(w)
			return
		}
		// The call out happened, so the key must not stay open: record
		// the response_too_large problem as the final answer, with the
		// effects, the one 5xx ever stored. A retry replays it; nothing
		// else could complete the key with the real answer either.
		small := c.render(r, ErrResponseTooLarge)
		done = c.completed(&small, now)
		send, substituted = replayAs(small, false), true
		err = write(done)
		if errors.Is(err, ErrResponseTooLarge) {
			// The effects alone are more than one write of the store
			// carries: no answer can be stored with them, ever. The key
			// must end all the same: the problem is recorded without
			// them, and the log line says they were not written.
			c.obs.Err += "; the effects alone are too large for the store: the problem recorded without them"
			effects = false
			err = write(done)
		}
	}
	var (
		conflict *ConflictError
		rejected *RejectedError
	)
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
	case errors.As(err, &rejected) && c.mode == Leased && reserved:
		// Nothing left the store: the business answer replaces the
		// handler's, stored under the same lease.
		c.refuse(ctx, r, rejected, now)
		c.answer(w)
		return
	case errors.As(err, &rejected):
		// The call out happened, but its local effects cannot be written:
		// the state has drifted from what the holds guaranteed. Answer 500,
		// unstored (the business answer of the rejection describes the
		// effect, not this request's outcome); the reservation expires
		// into reconciliation, whose failure on the same effects raises
		// the alarm.
		c.obs.Err = err.Error()
		c.decide(OutcomeStoreError, c.errorAnswer(r, fmt.Errorf("idempotency: complete: the effects of a request that called out were rejected: %v", err)))
		c.answer(w)
		return
	case err != nil && c.mode == External && reserved:
		// The call out happened and the handler's answer says how it
		// ended, but it could not be recorded. Send it as it is, not
		// stored: the reservation stays, expires into reconciliation, and
		// the Resolver records the same answer from the other system.
		// (Without a reservation nothing would reconcile it; the answer
		// below sends the client back to retry instead.)
		c.obs.Outcome, c.obs.Err = OutcomeStoreError, err.Error()
		send(w)
		return
	case err != nil:
		// The completion's transaction (the effects with it) may or may
		// not have landed: a retry either replays it or, once the lease
		// has run out, executes again.
		c.storeFailed(r, err)
		c.answer(w)
		return
	}
	c.m.cfg.Cache.put(c.m, done)
	c.m.cfg.Hook(ctx, PointAfterComplete)
	if c.phased && c.finalPoint != "" {
		c.m.cfg.Hook(ctx, PointAfter(c.finalPoint))
	}
	switch {
	case !effects:
		c.obs.Outcome = OutcomeEffectsDropped // response_too_large, stored without the effects
	case substituted:
		c.obs.Outcome = OutcomeStoreError // response_too_large, stored in place of the answer
	default:
		c.obs.Outcome = OutcomeCreated
	}
	send(w)
}

// pause ends a multi-step request's attempt without an answer to store (a
// 5xx, or an outcome it cannot know) and leaves its record at its recovery
// point for a retry or the reconciler to resume: an unknown outcome keeps
// the lease running, as a call out may still land, while a 5xx that
// provably had no effect gives the lease up (a new token, expired now) so
// that a retry resumes at once.
func (c *Call) pause(ctx context.Context, rec *recorder, now time.Time) {
	c.obs.Outcome = OutcomeReleased
	if c.unknown {
		c.obs.Outcome = OutcomeUnknown
		return
	}
	st := c.steps.rec
	p := Progress{From: st.Point, Point: st.Point, Data: st.Data, LeaseToken: NewToken(), ExpiresAt: now, UpdatedAt: now, Status: StatusInProgress, External: st.External}
	if err := c.timed(func() error { return c.m.cfg.Store.Advance(ctx, c.key, st.LeaseToken, p, nil) }); err != nil {
		c.obs.Err = err.Error()
	}
}

// commitEffects are the effects of a commit: the holds, then the
// completion's effects.
func (c *Call) commitEffects() []Effect {
	if len(c.holds) == 0 {
		return c.effects
	}
	return append(append(make([]Effect, 0, len(c.holds)+len(c.effects)), c.holds...), c.effects...)
}

// refuse answers an effect's rejection. A 4xx answer is a business outcome
// and is stored, without the effects, so that the key replays it: in place
// of the reservation when the lease is held, else as a fresh commit (whose
// conflict, should the key have been taken meanwhile, decides the answer as
// usual). Any other answer is sent unstored, and a reservation is released.
// ctx is the writes' context.
func (c *Call) refuse(ctx context.Context, r *http.Request, rejected *RejectedError, now time.Time) {
	resp := c.render(r, rejected.Err)
	c.obs.Err = rejected.Error()
	if resp.Status < 400 || resp.Status >= 500 {
		if c.rec.LeaseToken != "" {
			if err := c.timed(func() error { return c.m.cfg.Store.Release(ctx, c.key, c.rec.LeaseToken, nil) }); err != nil {
				c.obs.Err += "; release: " + err.Error()
			}
		}
		c.decide(OutcomeStoreError, replayAs(resp, false))
		return
	}
	done := c.completed(&resp, now)
	var err error
	if c.rec.LeaseToken != "" {
		err = c.timed(func() error { return c.m.cfg.Store.Complete(ctx, done, c.rec.LeaseToken, nil) })
	} else {
		err = c.timed(func() error { return c.m.cfg.Store.Commit(ctx, done, nil, now) })
	}
	if err != nil {
		c.resolve(ctx, r, err, now)
		return
	}
	c.m.cfg.Cache.put(c.m, done)
	c.decide(OutcomeRefused, replayAs(resp, false))
}

// render captures what OnError writes for err.
func (c *Call) render(r *http.Request, err error) Response {
	rec := newRecorder()
	c.m.cfg.OnError(rec, r, err)
	return *rec.response()
}

// completed is the COMPLETED record storing resp. An External record keeps
// its canonical request, as the reservation had it.
func (c *Call) completed(resp *Response, now time.Time) Record {
	done := Record{
		Key:         c.key,
		Status:      StatusCompleted,
		Route:       c.route,
		Fingerprint: c.fingerprint,
		External:    c.mode == External,
		LeaseToken:  c.rec.LeaseToken,
		ExpiresAt:   now.Add(c.m.cfg.Retention),
		Request:     c.rec.Request,
		Response:    resp,
		CreatedAt:   createdAt(c.rec, now),
		UpdatedAt:   now,
	}
	if c.steps != nil {
		done.Point, done.Data = c.steps.rec.Point, c.steps.Data()
		if c.finalPoint != "" {
			done.Point = c.finalPoint
		}
	}
	return done
}

func createdAt(rec Record, now time.Time) time.Time {
	if rec.CreatedAt.IsZero() {
		return now
	}
	return rec.CreatedAt
}

// resolve decides the response for a failed store write: a replay, 409, 422
// or 503. ctx is the context of the writes it makes (decideExisting).
func (c *Call) resolve(ctx context.Context, r *http.Request, err error, now time.Time) {
	var conflict *ConflictError
	if !errors.As(err, &conflict) {
		c.storeFailed(r, err)
		return
	}
	c.decideExisting(ctx, r, conflict.Existing, now, true)
}

// storeFailed decides the answer to a store error that is no conflict:
// 503 store_unavailable when the store says it is unavailable (a retry may
// succeed), 500 response_too_large for an answer it cannot keep, 413
// payload_too_large for a request it cannot keep, and 500
// internal_error for anything else (a missing table, denied access, an
// invalid request: a misconfiguration or a bug that a retry cannot cure).
// Its text goes to the observation, never to the client.
func (c *Call) storeFailed(r *http.Request, err error) {
	c.obs.Err = err.Error()
	if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrResponseTooLarge) && !errors.Is(err, ErrBodyTooLarge) {
		err = fmt.Errorf("idempotency: store: %v", err)
	}
	c.decide(OutcomeStoreError, c.errorAnswer(r, err))
}

// decideExisting decides the response to existing, the record under the
// key: a replay, 409 or 422. When mayAbandon is set, an abandoned record is
// dealt with first (taken over at its recovery point, or handed to
// reconciliation) in writes made with ctx: the request's context before
// the handler has run, a detached one after.
func (c *Call) decideExisting(ctx context.Context, r *http.Request, existing *Record, now time.Time, mayAbandon bool) {
	inProgress := func(d time.Duration) {
		c.decide(OutcomeInProgress, c.errorAnswer(r, &InProgressError{RetryAfter: d}))
	}
	switch {
	case existing == nil:
		inProgress(time.Second)
	case existing.Fingerprint != c.fingerprint:
		c.decide(OutcomeMismatch, c.errorAnswer(r, ErrKeyReused))
	case existing.Status == StatusCompleted && existing.Response != nil:
		c.m.cfg.Cache.put(c.m, *existing)
		c.decide(OutcomeReplayed, replay(*existing.Response))
	case existing.Status == StatusInProgress && !existing.Expired(now):
		inProgress(existing.ExpiresAt.Sub(now))
	case mayAbandon && c.phased && existing.Status == StatusInProgress && existing.Point != "":
		// A multi-step request abandoned at a recovery point: take the
		// lease over and resume there.
		c.takeOver(ctx, r, *existing, now)
	case mayAbandon && (existing.Status == StatusInProgress && existing.External ||
		existing.Status == StatusUnknown && !now.Before(existing.UpdatedAt.Add(c.m.cfg.UnknownRedrive))):
		// Either the owner lost its lease while calling out, so its effect is
		// unknown, or an UNKNOWN record has waited UnknownRedrive for the
		// reconciler, which may have given up on it. Hand the key to
		// reconciliation (again) rather than executing again: the new lease
		// token is a stream MODIFY to UNKNOWN that triggers the reconciler,
		// and the write's condition on the old token lets one request per
		// UnknownRedrive do it. Its expiry moves to at least Retention from
		// now (extended, never shortened), as oncectl reannounce and the
		// sweeper's restore set it. The store's TTL never deletes an UNKNOWN
		// record (the write removes the DynamoDB store's TTL attribute from
		// an item written before UNKNOWN records lost it): its key is held
		// until the record is reconciled or an operator forgets it.
		expires := now.Add(c.m.cfg.Retention)
		if existing.Status == StatusUnknown && existing.ExpiresAt.After(expires) {
			expires = existing.ExpiresAt
		}
		err := c.timed(func() error {
			return c.m.cfg.Store.MarkUnknown(ctx, c.key, existing.LeaseToken, NewToken(), expires, now)
		})
		var again *ConflictError
		if errors.As(err, &again) {
			c.decideExisting(ctx, r, again.Existing, now, false)
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

// takeOver takes the lease of existing, an abandoned multi-step request,
// fenced on its lease token, and makes it the call's reservation. ctx is
// the write's context.
func (c *Call) takeOver(ctx context.Context, r *http.Request, existing Record, now time.Time) {
	p := Progress{From: existing.Point, Point: existing.Point, Data: existing.Data, LeaseToken: NewToken(), ExpiresAt: now.Add(c.m.cfg.Lease), UpdatedAt: now, Status: StatusInProgress, External: existing.External}
	err := c.timed(func() error { return c.m.cfg.Store.Advance(ctx, c.key, existing.LeaseToken, p, nil) })
	var conflict *ConflictError
	switch {
	case errors.As(err, &conflict):
		c.decideExisting(ctx, r, conflict.Existing, now, false)
		return
	case err != nil:
		c.resolve(ctx, r, err, now)
		return
	}
	rec := existing
	rec.LeaseToken, rec.ExpiresAt, rec.UpdatedAt = p.LeaseToken, p.ExpiresAt, p.UpdatedAt
	c.obs.Outcome = OutcomeResumed
	c.hold(rec)
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
func replay(resp Response) func(http.ResponseWriter) { return replayAs(resp, true) }

// replayAs writes resp, marked as replayed when replayed is set.
func replayAs(resp Response, replayed bool) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		h := w.Header()
		resp.SetHeader(h)
		if replayed {
			h.Set(ReplayedHeader, "true")
		}
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
