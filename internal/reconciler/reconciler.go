package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/stream"
)

// Metric names the Reconciler counts (docs/design.md). The stack alarms on
// MetricFailed.
const (
	MetricResolved = "reconcile_resolved"
	MetricFailed   = "reconcile_failed"
)

// Store is the part of idempotency.Store the Reconciler uses.
type Store interface {
	// Complete replaces the record held under lease with rec. It returns an
	// *idempotency.ConflictError when the lease is no longer held.
	Complete(ctx context.Context, rec idempotency.Record, lease string, effects []idempotency.Effect) error
	// Release deletes the record held under lease. It returns an
	// *idempotency.ConflictError when the lease is no longer held.
	Release(ctx context.Context, key idempotency.Key, lease string) error
}

// Looker finds what the provider did under an idempotency key;
// *provider.Client implements it.
type Looker interface {
	// Lookup returns the charge (succeeded or failed) made under key, or an
	// error wrapping provider.ErrNoCharge when there is none. Any other
	// error means the provider could not tell.
	Lookup(ctx context.Context, key string) (provider.Charge, error)
}

// Config configures a Reconciler. Store, Provider, Rebuild and
// ProviderTimeout are required.
type Config struct {
	// Store is the idempotency store.
	Store Store
	// Provider is asked what happened.
	Provider Looker
	// Rebuild returns the response the request of rec would have received
	// had the provider's answer, the charge c, come back in time.
	Rebuild func(rec idempotency.Record, c provider.Charge) (idempotency.Response, error)
	// ProviderTimeout bounds one call to the provider: a request that became
	// UNKNOWN at t has no call in flight after t + ProviderTimeout.
	ProviderTimeout time.Duration
	// Retention is how long a completed record is kept
	// (idempotency.DefaultRetention).
	Retention time.Duration
	// Logger receives one line per record finalised or failed (default:
	// discard).
	Logger *slog.Logger
	// Metrics counts reconcile_resolved and reconcile_failed (nil discards).
	Metrics *metrics.Emitter
	// Now returns the current time (time.Now).
	Now func() time.Time
}

// Reconciler finalises UNKNOWN records (see the package documentation). It is
// safe for concurrent use.
type Reconciler struct {
	cfg Config
}

// errUnsettled fails a record whose "no charge" cannot be trusted yet and
// whose invocation has no time left to wait.
var errUnsettled = errors.New("reconciler: a request with the key may still be in flight and the invocation cannot wait")

// New returns a Reconciler for cfg, filling in defaults.
func New(cfg Config) (*Reconciler, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("reconciler: Config.Store is required"))
	}
	if cfg.Provider == nil {
		errs = append(errs, errors.New("reconciler: Config.Provider is required"))
	}
	if cfg.Rebuild == nil {
		errs = append(errs, errors.New("reconciler: Config.Rebuild is required"))
	}
	if cfg.ProviderTimeout <= 0 {
		errs = append(errs, errors.New("reconciler: Config.ProviderTimeout must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Retention <= 0 {
		cfg.Retention = idempotency.DefaultRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
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
	if err == nil {
		log = log.With("tenant", rec.Key.Tenant, "key", rec.Key.Short(), "route", rec.Route)
		err = r.reconcile(ctx, log, rec)
	} else {
		err = fmt.Errorf("reconciler: decode new image: %w", err)
	}
	if err != nil {
		r.cfg.Metrics.Count(MetricFailed)
		log.Error("reconciliation failed; the record will be retried", "err", err.Error())
		return err
	}
	return nil
}

// reconcile finalises rec from what the provider did.
func (r *Reconciler) reconcile(ctx context.Context, log *slog.Logger, rec idempotency.Record) error {
	key := rec.ForwardKey()
	start := r.cfg.Now()
	charge, err := r.cfg.Provider.Lookup(ctx, key)
	if errors.Is(err, provider.ErrNoCharge) {
		if settled := r.settledAt(rec, start); start.Before(settled) {
			// The lookup may have overtaken a request still on its way.
			if err := r.waitUntil(ctx, settled); err != nil {
				return err
			}
			charge, err = r.cfg.Provider.Lookup(ctx, key)
		}
	}
	switch {
	case err == nil:
		return r.complete(ctx, log, rec, charge)
	case errors.Is(err, provider.ErrNoCharge):
		return r.release(ctx, log, rec)
	default:
		return fmt.Errorf("reconciler: look up %s: %w", rec.Key.Short(), err)
	}
}

// settledAt is when no request with rec's key can still be in flight to the
// provider: ProviderTimeout after rec became UNKNOWN. A record without an
// update time, or with one after start, counts as updated at start.
func (r *Reconciler) settledAt(rec idempotency.Record, start time.Time) time.Time {
	at := rec.UpdatedAt
	if at.IsZero() || at.After(start) {
		at = start
	}
	return at.Add(r.cfg.ProviderTimeout)
}

// waitUntil waits until t, provided ctx leaves time for one more lookup
// after it; otherwise it returns errUnsettled at once.
func (r *Reconciler) waitUntil(ctx context.Context, t time.Time) error {
	d := t.Sub(r.cfg.Now())
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d+r.cfg.ProviderTimeout {
		return fmt.Errorf("%w (until %s)", errUnsettled, t.UTC().Format(time.RFC3339Nano))
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("reconciler: waiting for in-flight requests: %w", context.Cause(ctx))
	case <-timer.C:
		return nil
	}
}

// complete records the response rebuilt from charge.
func (r *Reconciler) complete(ctx context.Context, log *slog.Logger, rec idempotency.Record, charge provider.Charge) error {
	resp, err := r.cfg.Rebuild(rec, charge)
	if err != nil {
		return fmt.Errorf("reconciler: rebuild the response of %s from charge %s: %w", rec.Key.Short(), charge.ID, err)
	}
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
		Response:    &resp,
		CreatedAt:   created,
		UpdatedAt:   now,
	}
	log = log.With("charge", charge.ID, "charge_status", charge.Status)
	err = r.cfg.Store.Complete(ctx, done, rec.LeaseToken, nil)
	if superseded(log, err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reconciler: complete %s: %w", rec.Key.Short(), err)
	}
	r.cfg.Metrics.Count(MetricResolved)
	log.Info("unknown outcome resolved: the provider charged; response recorded", "status", resp.Status)
	return nil
}

// release frees the key of a request that provably had no effect.
func (r *Reconciler) release(ctx context.Context, log *slog.Logger, rec idempotency.Record) error {
	err := r.cfg.Store.Release(ctx, rec.Key, rec.LeaseToken)
	if superseded(log, err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reconciler: release %s: %w", rec.Key.Short(), err)
	}
	r.cfg.Metrics.Count(MetricResolved)
	log.Info("unknown outcome resolved: the provider has no charge; key released")
	return nil
}

// superseded reports (and logs) whether err says the lease is no longer
// held: someone else finalised the record.
func superseded(log *slog.Logger, err error) bool {
	var conflict *idempotency.ConflictError
	if !errors.As(err, &conflict) {
		return false
	}
	existing := "none"
	if conflict.Existing != nil {
		existing = string(conflict.Existing.Status)
	}
	log.Info("unknown outcome already finalised elsewhere; nothing to do", "existing", existing)
	return true
}
