package abandoned

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
)

// LostCheckAfter is how long past its expiry an UNKNOWN record, or an
// External reservation past its lease, must be for its check to count as
// lost: the Checker redrives an UNKNOWN record at its expiry, and hands an
// External reservation to the reconciler at its lease deadline (plus the
// Scheduler's margin), its check sent on in hops of at most
// recovery.MaxDelay; LostCheckMargin covers the queue's delivery, the
// Checker's retries and clocks that disagree. Past it, its check chain was
// lost (a check in the check dead-letter queue, or the Scheduler's stream
// record in the sweeper's): `oncectl reannounce` re-arms it. Neither record
// has a TTL attribute: nothing else ends it.
//
// The margin does not cover the sweeper mapping's stream retries: the
// Scheduler's stream record is retried for up to StreamMaxRecordAge before
// it goes to the sweeper's dead-letter queue, so a check may still be
// armed, and come late, for a record called lost. Re-arming one is
// harmless: the late check, and the write it leads to, are fenced on the
// lease token rearm replaces. Alarming on one is not: Record.Stuck waits
// for those retries too.
const LostCheckAfter = MaxDelay + LostCheckMargin

// MaxDelay is recovery.MaxDelay, the longest a recovery check is delayed
// in one hop (SQS's 15 minutes), copied so that the auditor's binary does
// not link the recovery package for one constant (TestMaxDelay checks they
// agree).
const MaxDelay = 15 * time.Minute

// LostCheckMargin is the slack of LostCheckAfter past recovery.MaxDelay.
const LostCheckMargin = 15 * time.Minute

// StreamMaxRecordAge is how long the sweeper's event source mapping on the
// idempotency table's stream retries a record (its
// MaximumRecordAgeInSeconds in template.yaml, which internal/deploytest's
// TestStreamMaxRecordAge checks) before the record goes to SweeperDLQ: the
// Scheduler may arm an External reservation's check up to that long after
// the write it reads.
const StreamMaxRecordAge = time.Hour

// Filter returns the Scan filter that reads, at now, the records FromItem
// classifies: the UNKNOWN records and the External reservations
// (IN_PROGRESS) whose lease ran out, of tenant unless it is empty; with its
// expression attribute names and values.
func Filter(tenant string, now time.Time) (expr string, names map[string]string, values map[string]types.AttributeValue) {
	expr = "(#status = :unknown OR #status = :in_progress AND #external = :true AND #expires_ms <= :now)"
	names = map[string]string{"#status": dynamo.AttrStatus, "#external": dynamo.AttrExternal, "#expires_ms": dynamo.AttrExpiresAtMS}
	values = map[string]types.AttributeValue{
		":unknown":     &types.AttributeValueMemberS{Value: string(idempotency.StatusUnknown)},
		":in_progress": &types.AttributeValueMemberS{Value: string(idempotency.StatusInProgress)},
		":true":        &types.AttributeValueMemberBOOL{Value: true},
		":now":         &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)},
	}
	if tenant != "" {
		expr += " AND #tenant = :tenant"
		names["#tenant"] = dynamo.AttrTenant
		values[":tenant"] = &types.AttributeValueMemberS{Value: tenant}
	}
	return expr, names, values
}

// Record is an idempotency record as a Scan with Filter read it.
type Record struct {
	idempotency.Record
	// LegacyTTL: its item still carries the TTL attribute: it went UNKNOWN
	// (or was reserved, External) before such records lost it, and
	// DynamoDB's TTL may delete it. No check is armed for a legacy UNKNOWN
	// record.
	LegacyTTL bool
}

// FromItem decodes item, read by a Scan with Filter at now, and reports
// whether it is listed: an UNKNOWN record, or an External reservation whose
// lease ran out whose check is lost (CheckLost) or whose item still carries
// the TTL attribute. A reservation whose check is still due to hand it to
// the reconciler is not. The error names the item's key.
func FromItem(item map[string]types.AttributeValue, now time.Time) (Record, bool, error) {
	rec, err := dynamo.RecordFromItem(item)
	if err != nil {
		return Record{}, false, fmt.Errorf("record %s: %w", pkOf(item), err)
	}
	_, ttl := item[dynamo.AttrExpiresAt]
	r := Record{Record: rec, LegacyTTL: ttl}
	switch {
	case rec.Status == idempotency.StatusUnknown:
		return r, true, nil
	case rec.Status == idempotency.StatusInProgress:
		// Filter reads External reservations whose lease ran out only.
		return r, ttl || CheckLost(rec, now), nil
	}
	return r, false, nil // not what Filter reads
}

// CheckLost reports whether rec, UNKNOWN or an External reservation, is
// past its expiry by more than LostCheckAfter at now: its check never
// redrove it, or never handed it to the reconciler.
func CheckLost(rec idempotency.Record, now time.Time) bool {
	return !rec.ExpiresAt.IsZero() && now.Sub(rec.ExpiresAt) > LostCheckAfter
}

// Abandoned reports whether r is one no check will redrive or hand to the
// reconciler at now, which `oncectl reannounce -lost` re-arms: past its
// expiry by more than LostCheckAfter (CheckLost), or an item with the TTL
// attribute (legacy) that is UNKNOWN or whose lease ran out.
func (r Record) Abandoned(now time.Time) bool {
	return CheckLost(r.Record, now) ||
		r.LegacyTTL && (r.Status == idempotency.StatusUnknown || r.Expired(now))
}

// Stuck reports whether the auditor counts r at now: an UNKNOWN record
// when Abandoned; an External reservation when its check is lost
// (CheckLost) and it was last written more than StreamMaxRecordAge plus
// LostCheckMargin ago, as the Scheduler's stream record of that write may
// be retried, and arm its check, until then (a sweeper or SQS incident
// must not raise the alarm for records whose check is still coming).
//
// A legacy reservation (its item still carries the TTL attribute) meets
// the same rule, though reannounce -lost re-arms it as soon as its lease
// has run out: its check, if one was armed before the upgrade, comes as
// late as a new reservation's. It is counted LostCheckAfter (30 minutes)
// after its lease ran out at the earliest, and never less than
// StreamMaxRecordAge plus LostCheckMargin (an hour and 15 minutes) after
// its last write: later than reannounce -lost may re-arm it, which only
// delays the alarm on a record the upgrade's runbook re-arms anyway. An
// UNKNOWN record needs no such wait: its expiry is the
// retention (at least an hour, config.MinRetention) after the write that
// made it UNKNOWN, so CheckLost already comes after the stream's retries.
func (r Record) Stuck(now time.Time) bool {
	if r.Status == idempotency.StatusInProgress {
		return r.External && CheckLost(r.Record, now) && now.Sub(r.UpdatedAt) > StreamMaxRecordAge+LostCheckMargin
	}
	return r.Abandoned(now)
}

// Kind is why r is stuck: KindLegacy when its item still carries the TTL
// attribute (run `oncectl reannounce -lost` after the upgrade), else
// KindLost (its check chain was lost).
func (r Record) Kind() string {
	if r.LegacyTTL {
		return KindLegacy
	}
	return KindLost
}

// The kinds of stuck records (Record.Kind), and KindUnreadable, an item
// the Scan filter reads that FromItem cannot decode: nothing recovers it,
// and `oncectl unknown` and `reannounce -lost` skip it, naming it (ItemID).
const (
	KindLost       = "lost"
	KindLegacy     = "legacy"
	KindUnreadable = "unreadable"
)

// Age returns when r's age is from, and that timestamp's attribute: its
// CreatedAt, when its request began (a client's retry re-marking it
// UNKNOWN, a redrive and the sweeper's restore keep it, and reset
// UpdatedAt); its UpdatedAt when it has no CreatedAt; the zero time when it
// has neither.
func Age(rec idempotency.Record) (time.Time, string) {
	switch {
	case !rec.CreatedAt.IsZero():
		return rec.CreatedAt, "created_at"
	case !rec.UpdatedAt.IsZero():
		return rec.UpdatedAt, "updated_at"
	}
	return time.Time{}, ""
}

// ItemID returns item's partition key, the record ID (tenant#key-hash)
// when it is one, or "(no pk)": how an item that does not decode is named.
func ItemID(item map[string]types.AttributeValue) string { return pkOf(item) }

func pkOf(item map[string]types.AttributeValue) string {
	if s, ok := item[dynamo.AttrPK].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return "(no pk)"
}
