package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/internal/nilness"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/idempotency/stream"
)

// Finisher is the part of idempotency.Store the Reconciler uses.
type Finisher interface {
	// Complete replaces the record held under lease with rec and writes
	// effects. It returns an *idempotency.ConflictError when the lease is no
	// longer held.
	Complete(ctx context.Context, rec idempotency.Record, lease string, effects []idempotency.Effect) error
	// Release deletes the record held under lease and writes effects. It
	// returns an *idempotency.ConflictError when the lease is no longer held.
	Release(ctx context.Context, key idempotency.Key, lease string, effects []idempotency.Effect) error
}

// ReconcilerConfig configures a Reconciler. Store, Resolvers and Settle are
// required.
type ReconcilerConfig struct {
	// Store is the idempotency store.
	Store Finisher
	// Resolvers resolve the records of each External route. A record whose
	// route has none stays UNKNOWN (see the package documentation).
	Resolvers idempotency.Resolvers
	// Settle is how long after a call out the other system may still apply
	// it: at least the handler's timeout on the call, plus however long the
	// other system goes on with a request whose client gave up. A request
	// that became UNKNOWN at t can still take effect until t + Settle, so a
	// "nothing happened" found before then is looked up again at t + Settle,
	// and only one found after it releases the key. t is when the record
	// first went UNKNOWN, or a Resolver last advanced it to a later phase
	// (Record.UnknownSince), which a client's redrive
	// (idempotency.Config.UnknownRedrive, a minute by default) does not
	// move: a Settle longer than UnknownRedrive is fine, the key is
	// released about Settle after it went UNKNOWN however often its client
	// retries. A record without UnknownSince (written UNKNOWN before
	// stores kept it, and not redriven since) is measured from its
	// UpdatedAt.
	//
	// A record that finds nothing before then waits for it within its
	// invocation: the whole wait when the invocation's deadline leaves
	// ResolveTime after it, else until the deadline less ResolveTime, and
	// then it fails (reconcile_deferred), to be delivered again and wait on.
	// So a Settle resolves a key within one invocation when it is shorter
	// than the invocation's timeout less ResolveTime (and less the time since
	// the record went UNKNOWN), and within the stream's deliveries when it is
	// shorter than about (retries + 1) x (timeout - ResolveTime). Past that,
	// the event source mapping sends the record, and every later one of its
	// batch, to its on-failure destination, and the key stays UNKNOWN until
	// a redrive (a client's retry after UnknownRedrive, or the Checker's at
	// the record's expiry) hands it to the Reconciler again.
	Settle time.Duration
	// ResolveTime is how long one resolution may take: a Resolver's call
	// (bounded by the other system's timeout), the store calls it makes
	// around it (a read before the call, a phase committed after it:
	// idempotency.Steps.Advance), and the write that completes or releases
	// the record, each at its worst. A wait for Settle leaves at least this
	// much of the invocation; an invocation with less than this left fails
	// the record at once. Not negative; DefaultResolveTime when zero.
	ResolveTime time.Duration
	// Retention is how long a completed record is kept
	// (idempotency.DefaultRetention).
	Retention time.Duration
	// Deliverable, if set, is asked whether a resolved answer can be
	// delivered, before it is stored, as the Middleware's
	// idempotency.Config.Deliverable is: an error refuses it as an answer
	// too large for the store is refused (the response_too_large problem
	// recorded instead, with the resolution's effects). Set it to the
	// Middleware's (apigw.Deliverable for a route a Lambda serves: Lambda
	// returns at most 6 MB) when a Resolver can rebuild an answer that
	// large; nil puts no limit beyond the store's.
	Deliverable func(idempotency.Response) error
	// Logger receives one line per record finalised or failed (default:
	// discard).
	Logger *slog.Logger
	// Metrics counts reconcile_resolved, reconcile_deferred,
	// reconcile_failed, reconcile_unroutable and reconcile_effects_dropped.
	Metrics Counter
	// Now returns the current time (time.Now).
	Now func() time.Time
}

// Reconciler finalises UNKNOWN records (see the package documentation). It is
// safe for concurrent use.
type Reconciler struct {
	cfg ReconcilerConfig
}

// DefaultResolveTime is ReconcilerConfig.ResolveTime when it is zero.
const DefaultResolveTime = 5 * time.Second

// errUnsettled fails a record whose "nothing happened" cannot be trusted yet
// and whose invocation has no time left to wait for it.
var errUnsettled = errors.New("recovery: a request with the key may still be in flight and the invocation cannot wait until it has settled")

// NewReconciler returns a Reconciler for cfg, filling in defaults. A Store or
// a Resolver that is nil, or an interface holding a nil pointer or a nil
// function (a nil ResolverFunc), is an error here rather than a panic at the
// first record, as is a Store whose Validate method reports it
// misconfigured (dynamo.Store.Validate).
func NewReconciler(cfg ReconcilerConfig) (*Reconciler, error) {
	var errs []error
	if err := storeError("ReconcilerConfig", cfg.Store); err != nil {
		errs = append(errs, err)
	}
	if len(cfg.Resolvers) == 0 {
		errs = append(errs, errors.New("recovery: ReconcilerConfig.Resolvers is required"))
	}
	for route, r := range cfg.Resolvers {
		if nilness.Nil(r) {
			errs = append(errs, fmt.Errorf("recovery: route %q has a nil Resolver", route))
		}
	}
	if cfg.Settle <= 0 {
		errs = append(errs, errors.New("recovery: ReconcilerConfig.Settle must be positive"))
	}
	if cfg.ResolveTime < 0 {
		errs = append(errs, fmt.Errorf("recovery: ReconcilerConfig.ResolveTime %v must not be negative", cfg.ResolveTime))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Retention <= 0 {
		cfg.Retention = idempotency.DefaultRetention
	}
	if cfg.ResolveTime == 0 {
		cfg.ResolveTime = DefaultResolveTime
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Metrics = counterOr(cfg.Metrics)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reconciler{cfg: cfg}, nil
}

// Handle is the stream handler: it handles the records of ev in order and
// reports the first one that failed, and every later one, as batch item
// failures. It never returns an error itself.
func (r *Reconciler) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return stream.Process(ctx, ev, r.record), nil
}

// record handles one stream record, counting and logging a failure.
func (r *Reconciler) record(ctx context.Context, er events.DynamoDBEventRecord) error {
	c := stream.NewChange(er)
	if c.EventName == events.DynamoDBOperationTypeRemove || dynamo.StreamImageStatus(c.NewImage) != idempotency.StatusUnknown {
		return nil // not a record waiting for reconciliation
	}
	log := r.cfg.Logger.With("event_id", c.EventID, "sequence_number", c.SequenceNumber)
	rec, err := dynamo.RecordFromStreamImage(c.NewImage)
	if err != nil {
		err = fmt.Errorf("recovery: reconcile: decode new image: %w", err)
		r.cfg.Metrics.Count(MetricFailed)
		log.Error("reconciliation failed; the record will be retried", "err", err.Error())
		return err
	}
	log = log.With("tenant", rec.Key.Tenant, "key", rec.Key.Short(), "route", rec.Route)
	return r.Reconcile(ctx, log, rec)
}

// Reconcile finalises the UNKNOWN record rec with its route's Resolver, as
// Handle does for a stream record, logging to log (the Reconciler's logger
// when nil). It returns an error when rec should be tried again. A record in
// any other state is refused with an error, and nothing is asked or written:
// an IN_PROGRESS record belongs to the request that holds its lease (or, once
// the lease has run out, to the Checker, which hands it on as UNKNOWN), and
// resolving it would race that request.
func (r *Reconciler) Reconcile(ctx context.Context, log *slog.Logger, rec idempotency.Record) error {
	if log == nil {
		log = r.cfg.Logger
	}
	if rec.Status != idempotency.StatusUnknown {
		return fmt.Errorf("recovery: reconcile %s: the record is %s, not %s", rec.Key.Short(), rec.Status, idempotency.StatusUnknown)
	}
	resolver, ok := r.cfg.Resolvers[rec.Route]
	if !ok {
		r.cfg.Metrics.Count(MetricUnroutable)
		log.Error("UNKNOWN record of a route without a resolver: left UNKNOWN for an operator; it is never released or re-executed")
		return nil
	}
	err := r.reconcile(ctx, log, resolver, rec)
	switch {
	case errors.Is(err, idempotency.ErrUnresolvable):
		r.cfg.Metrics.Count(MetricUnroutable)
		log.Error("UNKNOWN record the resolver can never resolve: left UNKNOWN for an operator", "err", err.Error())
		return nil
	case errors.Is(err, errUnsettled):
		// Expected, not a fault: the provider has nothing yet and a request
		// with the key may still reach it, so the record is retried later.
		r.cfg.Metrics.Count(MetricDeferred)
		log.Warn("reconciliation deferred: nothing happened so far, but a request with the key may still be in flight and the invocation cannot wait until it has settled; the record will be retried and wait on", "err", err.Error())
		return err
	case err != nil:
		r.cfg.Metrics.Count(MetricFailed)
		log.Error("reconciliation failed; the record will be retried", "err", err.Error())
		return err
	}
	return nil
}

// reconcile finalises rec from what resolver finds.
func (r *Reconciler) reconcile(ctx context.Context, log *slog.Logger, resolver idempotency.Resolver, rec idempotency.Record) error {
	start := r.cfg.Now()
	res, err := resolver.Resolve(ctx, rec)
	if err == nil && res.Response == nil {
		if settled := r.settledAt(rec, start); start.Before(settled) {
			// The look-up may have overtaken a request still on its way.
			if err := r.waitUntil(ctx, settled); err != nil {
				return err
			}
			res, err = resolver.Resolve(ctx, rec)
		}
	}
	switch {
	case superseded(log, err):
		// A Resolver resuming the request's phases (ResumeSteps) found
		// the lease gone: the record was finished (or handed on) since the
		// stream image was taken, as when a stale image is redelivered.
		return nil
	case err != nil:
		return fmt.Errorf("recovery: resolve %s: %w", rec.Key.Short(), err)
	case res.Response != nil:
		return r.complete(ctx, log, rec, res)
	default:
		return r.release(ctx, log, rec, res)
	}
}

// settledAt is when no call of rec's request can still take effect at the
// other system: Settle after rec first became UNKNOWN, or a Resolver last
// advanced it (its UnknownSince), which a redrive does not move: every call
// out of the request was made before it, and a redrive calls nothing out. Measured from the redrive's
// UpdatedAt instead, a client retrying more often than Settle would put it
// off for ever, each image's release superseded by the next redrive. A
// record without UnknownSince (one that went UNKNOWN before stores kept
// it, not redriven since) falls back to its UpdatedAt: its last change,
// which is no earlier than when it went UNKNOWN. A record with neither, or
// with a time after start, counts as unknown since start.
func (r *Reconciler) settledAt(rec idempotency.Record, start time.Time) time.Time {
	at := rec.UnknownSince
	if at.IsZero() {
		at = rec.UpdatedAt
	}
	if at.IsZero() || at.After(start) {
		at = start
	}
	return at.Add(r.cfg.Settle)
}

// waitUntil waits until t, when ctx leaves ResolveTime after it for one more
// resolution. Otherwise it waits as long as ctx leaves ResolveTime after the
// wait, so that the invocation's time is spent waiting rather than thrown
// away and the stream's next delivery has that much less to wait, and then
// returns errUnsettled; at once when ctx leaves less than ResolveTime.
func (r *Reconciler) waitUntil(ctx context.Context, t time.Time) error {
	d, settles := t.Sub(r.cfg.Now()), true
	if deadline, ok := ctx.Deadline(); ok {
		if left := time.Until(deadline) - r.cfg.ResolveTime; left < d {
			d, settles = max(left, 0), false
		}
	}
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("recovery: waiting for in-flight requests: %w", context.Cause(ctx))
		case <-timer.C:
		}
	}
	if !settles {
		return fmt.Errorf("%w (until %s; waited %v, leaving the invocation %v for a resolution)",
			errUnsettled, t.UTC().Format(time.RFC3339Nano), d, r.cfg.ResolveTime)
	}
	return nil
}

// complete records the resolved response, with the resolution's effects.
func (r *Reconciler) complete(ctx context.Context, log *slog.Logger, rec idempotency.Record, res idempotency.Resolution) error {
	done := r.completed(rec, res)
	err := r.deliverable(done.Response)
	if err == nil {
		err = r.cfg.Store.Complete(ctx, done, rec.LeaseToken, res.Effects)
	}
	if errors.Is(err, idempotency.ErrResponseTooLarge) {
		// The request took effect but its answer cannot be kept: record
		// the response_too_large problem instead, as the live request
		// does, so that the key is final rather than retried forever.
		log.Error("unknown outcome resolved, but its answer is too large to store: response_too_large recorded instead", "err", err.Error())
		done.Response = tooLargeResponse()
		err = r.cfg.Store.Complete(ctx, done, rec.LeaseToken, res.Effects)
		if errors.Is(err, idempotency.ErrResponseTooLarge) {
			// The effects alone are more than one write of the store
			// carries: no answer can be stored with them, ever. Retrying
			// would fail the same way on every delivery, so the key ends
			// here: the problem recorded without them, counted as
			// reconcile_effects_dropped (alarmed) for an operator to
			// repair what they would have written. Counted only by the
			// write that ends the key: a failed write is delivered again
			// (and counted as a failure then), a redelivery finds the
			// lease gone.
			log.Error("the resolution's effects alone are too large for the store: response_too_large recorded without them; they are not written", "err", err.Error(), "effects", len(res.Effects))
			if err = r.cfg.Store.Complete(ctx, done, rec.LeaseToken, nil); err == nil {
				r.cfg.Metrics.Count(MetricEffectsDropped)
				return nil
			}
		}
	}
	if superseded(log, err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recovery: complete %s: %w", rec.Key.Short(), err)
	}
	r.cfg.Metrics.Count(MetricResolved)
	log.Info("unknown outcome resolved: the request took effect; response recorded", "status", done.Response.Status)
	return nil
}

// deliverable is ReconcilerConfig.Deliverable's verdict on resp: nil, or
// an error matching idempotency.ErrResponseTooLarge.
func (r *Reconciler) deliverable(resp *idempotency.Response) error {
	if r.cfg.Deliverable == nil || resp == nil {
		return nil
	}
	err := r.cfg.Deliverable(*resp)
	if err == nil || errors.Is(err, idempotency.ErrResponseTooLarge) {
		return err
	}
	return fmt.Errorf("%w: ReconcilerConfig.Deliverable: %w", idempotency.ErrResponseTooLarge, err)
}

// completed is rec COMPLETED with res's response, at its final point.
func (r *Reconciler) completed(rec idempotency.Record, res idempotency.Resolution) idempotency.Record {
	now := r.cfg.Now()
	created := rec.CreatedAt
	if created.IsZero() {
		created = now
	}
	done := idempotency.Record{
		Key:         rec.Key,
		Status:      idempotency.StatusCompleted,
		Route:       rec.Route,
		Fingerprint: rec.Fingerprint,
		External:    rec.External,
		LeaseToken:  rec.LeaseToken,
		ExpiresAt:   now.Add(r.cfg.Retention),
		Request:     rec.Request,
		Response:    res.Response,
		Point:       rec.Point,
		Data:        rec.Data,
		CreatedAt:   created,
		UpdatedAt:   now,
	}
	if res.Steps != nil {
		done.Point, done.Data = res.Steps.Point(), res.Steps.Data()
	}
	if res.FinalPoint != "" {
		done.Point = res.FinalPoint
	}
	return done
}

// tooLargeResponse is the answer recorded for a request whose own answer
// is too large to store: idempotency.ErrResponseTooLarge as its problem.
func tooLargeResponse() *idempotency.Response {
	d := problem.For(idempotency.ErrResponseTooLarge)
	return &idempotency.Response{Status: d.Status, Header: problem.Renderer{}.Header(d), Body: problem.Renderer{}.Body(d)}
}

// release frees the key of a request that provably had no effect, undoing
// its holds with the resolution's effects.
func (r *Reconciler) release(ctx context.Context, log *slog.Logger, rec idempotency.Record, res idempotency.Resolution) error {
	err := r.cfg.Store.Release(ctx, rec.Key, rec.LeaseToken, res.Effects)
	if errors.Is(err, idempotency.ErrResponseTooLarge) {
		// The effects that undo the holds are more than one write of the
		// store carries: they can never be written. Failing at every
		// delivery would leave the key UNKNOWN for good, and releasing it
		// without them would let a retry take the holds a second time. The
		// key ends as the live request's release does: completed with the
		// response_too_large problem, the holds kept, counted as
		// reconcile_effects_dropped (alarmed; once, by the write that ends
		// the key) for an operator to give them back.
		log.Error("the resolution's release effects alone are too large for the store: response_too_large recorded instead of the release, the holds kept; they are not written", "err", err.Error(), "effects", len(res.Effects))
		done := r.completed(rec, idempotency.Resolution{Response: tooLargeResponse(), Steps: res.Steps})
		if err = r.cfg.Store.Complete(ctx, done, rec.LeaseToken, nil); err == nil {
			r.cfg.Metrics.Count(MetricEffectsDropped)
			return nil
		}
	}
	if superseded(log, err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recovery: release %s: %w", rec.Key.Short(), err)
	}
	r.cfg.Metrics.Count(MetricResolved)
	log.Info("unknown outcome resolved: the request had no effect; key released")
	return nil
}

// superseded reports (and logs) whether err says the lease is no longer
// held: someone else finalised the record.
func superseded(log *slog.Logger, err error) bool {
	return leaseLost(log, err, "unknown outcome already finalised elsewhere; nothing to do")
}
