package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/stream"
)

// Reserver is the part of idempotency.Store the Sweeper uses. A Reserver
// that is a RestoreMarker too (dynamo.Store and memory.Store are) has each
// REMOVE the Sweeper handles marked, so that a redelivery of it is
// recognised whatever became of the record since.
type Reserver interface {
	// Reserve writes rec and effects provided no record for its key exists
	// or the existing one is reclaimable at now; otherwise it returns an
	// *idempotency.ConflictError. When an effect's condition fails it
	// returns an *idempotency.RejectedError. Either way it writes nothing.
	// Other errors mean the store could not be written.
	Reserve(ctx context.Context, rec idempotency.Record, effects []idempotency.Effect, now time.Time) error
}

// RestoreMarker is what a Reserver may also provide: the marks of the
// stream REMOVE records the Sweeper handled, each named by the record's
// event ID, kept until an expiry past the stream's 24 hours. A mark is
// written with a restore (in Reserve's write) or, when the Sweeper counts
// zombie_unrestored instead, on its own. Without it (a store of your own
// that does not implement it) a redelivered REMOVE whose restore was since
// released is restored a second time, or counted zombie_unrestored again.
type RestoreMarker interface {
	// RestoreMark returns the effect that marks REMOVE id of key's record
	// until expiresAt, written with its restore: its condition fails
	// (Reserve's *idempotency.RejectedError, at the effect's index) when
	// the mark exists already.
	RestoreMark(key idempotency.Key, id string, expiresAt time.Time) idempotency.Effect
	// Mark writes the mark of REMOVE id of key's record until expiresAt,
	// unless it exists already (then it writes nothing and returns nil).
	Mark(ctx context.Context, key idempotency.Key, id string, expiresAt time.Time) error
	// Marked reports whether the mark of REMOVE id of key's record exists:
	// an earlier delivery of that REMOVE restored the record, or counted
	// it unrestored.
	Marked(ctx context.Context, key idempotency.Key, id string) (bool, error)
}

// restoreMarkKeep is how long a restore's mark is kept: a stream keeps a
// record for 24 hours, so a REMOVE is delivered again, if at all, within
// 24 hours of it (and of its first restore); a day more is the margin.
const restoreMarkKeep = 48 * time.Hour

// SweeperConfig configures a Sweeper. Store is required.
type SweeperConfig struct {
	// Store is the idempotency store the records are restored into.
	Store Reserver
	// Retention is the expiry a restored UNKNOWN record is given
	// (idempotency.DefaultRetention; the record itself stays until it is
	// reconciled: a restore carries no TTL); at least what
	// CheckerConfig.Retention says, for the same reason.
	Retention time.Duration
	// Logger receives one line per abandoned reservation and per failure
	// (default: discard).
	Logger *slog.Logger
	// Metrics counts zombie_swept, reconcile_scheduled and
	// zombie_unrestored.
	Metrics Counter
	// Now returns the current time (time.Now).
	Now func() time.Time
}

// Sweeper handles the REMOVE records of abandoned IN_PROGRESS reservations
// (see the package documentation). It is safe for concurrent use.
type Sweeper struct {
	cfg SweeperConfig
	// marker is cfg.Store as a RestoreMarker, nil when it is not one.
	marker RestoreMarker
}

// NewSweeper returns a Sweeper for cfg, filling in defaults. A Store that is
// nil, or an interface holding a nil pointer, is an error here rather than a
// panic at the first record, as is one whose Validate method reports it
// misconfigured (dynamo.Store.Validate). A Store that is not a
// RestoreMarker (a wrapper of one hides it) is logged at WARN: its REMOVEs
// are handled without marks.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if err := storeError("SweeperConfig", cfg.Store); err != nil {
		return nil, err
	}
	if cfg.Retention <= 0 {
		cfg.Retention = idempotency.DefaultRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Metrics = counterOr(cfg.Metrics)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	marker, _ := cfg.Store.(RestoreMarker)
	if marker == nil {
		cfg.Logger.Warn("recovery: the sweeper's store is not a RestoreMarker: a redelivered REMOVE may be restored or counted zombie_unrestored again",
			"store", fmt.Sprintf("%T", cfg.Store))
	}
	return &Sweeper{cfg: cfg, marker: marker}, nil
}

// Handle is the stream handler: it handles the records of ev in order and
// reports the first one that failed, and every later one, as batch item
// failures. It never returns an error itself.
func (s *Sweeper) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return stream.Process(ctx, ev, s.record), nil
}

// record handles one stream record.
func (s *Sweeper) record(ctx context.Context, er events.DynamoDBEventRecord) error {
	c := stream.NewChange(er)
	if c.EventName != events.DynamoDBOperationTypeRemove {
		return nil
	}
	status := dynamo.StreamImageStatus(c.OldImage)
	switch {
	case status == idempotency.StatusUnknown && !c.ByTTL():
		return nil // released by the reconciler (or deleted by an operator)
	case status != idempotency.StatusInProgress && status != idempotency.StatusUnknown:
		return nil // neither a reservation nor an unresolved outcome leaving the table
	}
	log := s.cfg.Logger.With("event_id", c.EventID, "sequence_number", c.SequenceNumber)
	old, err := dynamo.RecordFromStreamImage(c.OldImage)
	if err != nil && !c.ByTTL() && !ttlMayHaveRemoved(er, s.cfg.Now()) {
		// Neither TTL's by its identity nor, by its TTL attribute, one
		// TTL could have removed (an emulator's TTL deletion carries no
		// identity: LocalStack's): a delete by hand, as the runbook
		// deletes an item that does not decode. Nothing could restore it
		// anyway; failing would hold the shard through the mapping's
		// retries and send it to the dead-letter queue.
		log.Warn("undecodable record removed without the TTL identity: ignored", "status", string(status), "err", err.Error())
		return nil
	}
	if err != nil {
		err = fmt.Errorf("recovery: sweep: decode old image: %w", err)
		log.Error("undecodable record", "status", string(status), "err", err.Error())
		return err
	}
	log = log.With("tenant", old.Key.Tenant, "key", old.Key.Short(), "route", old.Route, "external", old.External)
	now := s.cfg.Now()
	if status == idempotency.StatusUnknown {
		// TTL deleted it before the reconciler resolved it (see unknown).
		return s.restore(ctx, log.With("expired_at", old.ExpiresAt), c, old, now, nil,
			"UNKNOWN record deleted by TTL before it was resolved")
	}

	if !RemovedByTTL(er, old, now) {
		log.Debug("reservation released within its lease: ignored",
			"lease_deadline", old.ExpiresAt, "removed_at", er.Change.ApproximateCreationDateTime.Time)
		return nil
	}
	log = log.With("by_ttl_identity", c.ByTTL(), "lease_deadline", old.ExpiresAt)
	if !old.External {
		s.cfg.Metrics.Count(MetricZombieSwept)
		log.Info("abandoned reservation swept")
		return nil
	}
	return s.restore(ctx, log, c, old, now, []string{MetricZombieSwept}, "abandoned external reservation")
}

// restore writes old, an External record that TTL deleted before its
// outcome was known (an abandoned reservation, or an UNKNOWN item written
// with a TTL attribute, before UNKNOWN records lost it), back as UNKNOWN
// under a fresh lease token, its expiry the retention from now, without a
// TTL (the store's Reserve of an UNKNOWN record): the INSERT that hands it
// to the reconciler, kept until it is reconciled. Deleted, an UNKNOWN record would leave its request unresolved
// for good: what its reservation held (a refund's hold on a payment) stays
// held, and a retry runs the request again whatever the first attempt did.
// Only a REMOVE of an UNKNOWN record carrying the TTL process's user
// identity gets here: the reconciler's release of a resolved record is a
// REMOVE of an UNKNOWN record too. counts are counted whatever happens;
// what names the record in the log lines.
//
// The restore is written with a mark naming c, the REMOVE (Reserve's
// condition and the mark's, in one write), so that a delivery of c again
// recognises its own restore even once the record has moved on from it: a
// redrive or a completion keeps the record's fingerprint and creation time
// (continues), but the reconciler's release of a request that had no effect
// deletes it, after which the key is free, or reserved anew by a retry that
// runs the request again, as it should. Without the mark that redelivery
// would restore the released record a second time, or count
// zombie_unrestored for a first attempt whose outcome was reconciled.
func (s *Sweeper) restore(ctx context.Context, log *slog.Logger, c stream.Change, old idempotency.Record, now time.Time, counts []string, what string) error {
	restored := idempotency.Record{
		Key:          old.Key,
		Status:       idempotency.StatusUnknown,
		Route:        old.Route,
		Fingerprint:  old.Fingerprint,
		External:     true,
		LeaseToken:   idempotency.NewToken(),
		ExpiresAt:    now.Add(s.cfg.Retention),
		Request:      old.Request,
		Point:        old.Point,
		Data:         old.Data,
		CreatedAt:    old.CreatedAt,
		UpdatedAt:    now,
		UnknownSince: now,
	}
	if old.Status == idempotency.StatusUnknown && !old.UnknownSince.IsZero() {
		// When it first went UNKNOWN: every call out of its request was
		// made before then (see idempotency.Record.UnknownSince).
		restored.UnknownSince = old.UnknownSince
	}
	id := c.EventID
	if id == "" {
		id = c.SequenceNumber
	}
	marker := s.marker
	if id == "" { // every stream record has both; a hand-made one may not
		marker = nil
	}
	var marks []idempotency.Effect
	if marker != nil {
		marks = []idempotency.Effect{marker.RestoreMark(old.Key, id, now.Add(restoreMarkKeep))}
	}
	err := s.cfg.Store.Reserve(ctx, restored, marks, now)
	var conflict *idempotency.ConflictError
	var rejected *idempotency.RejectedError
	switch {
	case errors.As(err, &rejected) && len(marks) > 0 && rejected.Index == 0:
		// The key is free (or reclaimable) and the mark is there: an
		// earlier delivery of this record handled it, restored it (the
		// record was finalised since: released, the request had no
		// effect) or counted it unrestored (the reservation that held the
		// key then is gone since).
		if len(counts) > 0 {
			s.cfg.Metrics.Count(counts...)
		}
		log.Info(what + "; not restored: an earlier delivery of this record handled it")
		return nil
	case errors.As(err, &conflict):
		ex := conflict.Existing
		if ex == nil || continues(*ex, old) {
			// An earlier delivery of this record restored it already (and
			// a retry may have redriven it, the reconciler completed it
			// since), or the record under the key could not be read:
			// nothing to do.
			existing := "none"
			if ex != nil {
				existing = string(ex.Status)
			}
			if len(counts) > 0 {
				s.cfg.Metrics.Count(counts...)
			}
			log.Info(what+"; not restored: the key is held already", "existing", existing)
			return nil
		}
		if marker != nil {
			handled, err := marker.Marked(ctx, old.Key, id)
			if err != nil {
				err = fmt.Errorf("recovery: sweep: read the mark of %s: %w", old.Key.Short(), err)
				log.Error("restoring "+what+" failed", "err", err.Error())
				return err
			}
			if handled {
				// An earlier delivery of this record restored it (the
				// record was finalised since, released, and the key
				// reserved anew by a retry that may run the request again
				// now that its outcome is settled), or found the key
				// taken already and counted zombie_unrestored.
				if len(counts) > 0 {
					s.cfg.Metrics.Count(counts...)
				}
				log.Info(what+"; not restored: an earlier delivery of this record handled it",
					"existing", string(ex.Status))
				return nil
			}
		}
		// A new reservation took the key between the deletion and now,
		// the same request's (a retry) or another's: it may have called
		// the other system again, and nothing will ask what the earlier
		// request did there. Counted, then marked, so that a redelivery
		// does not count it again (a mark that cannot be written only
		// lets a redelivery count it twice: logged, not retried).
		s.cfg.Metrics.Count(append(counts, MetricUnrestored)...)
		log.Error(what+" not restored: a new reservation holds its key; the request may have run twice, its first outcome at the other system is unreconciled",
			"created_at", old.CreatedAt, "existing", string(ex.Status), "existing_created_at", ex.CreatedAt,
			"same_fingerprint", ex.Fingerprint == old.Fingerprint)
		if marker != nil {
			if err := marker.Mark(ctx, old.Key, id, now.Add(restoreMarkKeep)); err != nil {
				log.Warn("marking "+what+" unrestored failed: a redelivery would count it again", "err", err.Error())
			}
		}
		return nil
	case err != nil:
		err = fmt.Errorf("recovery: sweep: restore %s as UNKNOWN: %w", old.Key.Short(), err)
		log.Error("restoring "+what+" failed", "err", err.Error())
		return err
	}
	s.cfg.Metrics.Count(append(counts, MetricReconcileScheduled)...)
	log.Info(what + ": restored as UNKNOWN for reconciliation")
	return nil
}

// continues reports whether ex, the record a restore of old met under its
// key, is old's request continuing rather than a new reservation: an
// earlier restore of old (the same fingerprint and creation time, which a
// restore, a redrive and a Resolver's Advance keep), UNKNOWN still or
// completed by the reconciler since. A reservation made after the deletion
// has a creation time of its own, and is IN_PROGRESS until it completes;
// nothing moves a restored UNKNOWN record back to IN_PROGRESS.
func continues(ex, old idempotency.Record) bool {
	return ex.Fingerprint == old.Fingerprint && ex.CreatedAt.Equal(old.CreatedAt) &&
		(ex.Status == idempotency.StatusUnknown || ex.Status == idempotency.StatusCompleted)
}

// ttlMayHaveRemoved reports whether DynamoDB's TTL could have made the
// REMOVE rec, read from its old image's raw TTL attribute alone (for an
// image that does not decode): the attribute is there, a number of
// seconds, and the removal (its approximate time, or now) is not before it.
func ttlMayHaveRemoved(rec events.DynamoDBEventRecord, now time.Time) bool {
	v, ok := rec.Change.OldImage[dynamo.AttrExpiresAt]
	if !ok || v.DataType() != events.DataTypeNumber {
		return false
	}
	secs, err := strconv.ParseInt(v.Number(), 10, 64)
	if err != nil {
		return false
	}
	removedAt := rec.Change.ApproximateCreationDateTime.Time
	if removedAt.IsZero() {
		removedAt = now
	}
	return !removedAt.Before(time.Unix(secs, 0))
}

// RemovedByTTL reports whether rec, the REMOVE of the IN_PROGRESS record old,
// is a deletion by DynamoDB's TTL process rather than a release by the api:
// its user identity says so, or its ApproximateCreationDateTime (now when it
// has none), truncated to the second, is at or after old's lease deadline
// rounded up to the second. See the package documentation for why this holds
// on AWS, DynamoDB Local and LocalStack.
func RemovedByTTL(rec events.DynamoDBEventRecord, old idempotency.Record, now time.Time) bool {
	if stream.NewChange(rec).ByTTL() {
		return true
	}
	removedAt := rec.Change.ApproximateCreationDateTime.Time
	if removedAt.IsZero() {
		removedAt = now
	}
	deadline := old.ExpiresAt.Truncate(time.Second)
	if deadline.Before(old.ExpiresAt) {
		deadline = deadline.Add(time.Second)
	}
	return !removedAt.Truncate(time.Second).Before(deadline)
}
