package operator

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/abandoned"
	"github.com/oncehq/once/internal/payments"
)

// staleHoldAge is holds -stale's default -older-than: a hold whose record
// still owns it is stale once the record is this old (since its request
// began, recordAge).
// The reconciler resolves an UNKNOWN record within minutes when the
// provider answers (a client's retry hands it over again once a minute),
// and the checker hands an External reservation whose lease ran out to it
// within its queue's delay (15 minutes) and retries.
const staleHoldAge = time.Hour

// What holds -stale says to run next for a hold.
const (
	// nextSettle: settle-hold, after a look at the provider's refunds.
	nextSettle = "settle-hold"
	// nextSettleNoRecord: settle-hold -no-record, on noRecordNote's terms.
	nextSettleNoRecord = "settle-hold -no-record"
	// nextReannounce: reannounce the key's record to the reconciler.
	nextReannounce = "reannounce"
	// nextWait: nothing yet; the note says what settles the hold, or when
	// settle-hold may.
	nextWait = "wait"
	// nextInspect: look at the key's item as it is (getItemCommand): its
	// record cannot be decoded, so whether the hold is stale cannot be
	// told.
	nextInspect = "inspect"
)

// What holds -stale's table says in its STALE column.
const (
	staleYes = "yes"
	// staleCheck: the hold's key has no record; noRecordNote says when it is
	// stale.
	staleCheck = "check"
	staleNo    = "no"
)

// staleHoldsHelp is what holds' help says of -stale.
const staleHoldsHelp = "With -stale it lists, instead, the holds of every payment (a Scan of the payments table, every\n" +
	"page of it up to a bound, of the payments with holds only; -tenant keeps one tenant's), the stale\n" +
	"ones only unless -all; stale first, then those with no record, then by their record's age, oldest\n" +
	"first, up to -limit: each hold's payment, key hash, amount, its key's record (status, age, expiry,\n" +
	"or none) and what to run next (-json adds the record's created_at and updated_at, the command, and\n" +
	"a note on what settles the hold). A record's age is since its created_at, when its request (and so\n" +
	"the hold) began, which a client's retry re-marking it UNKNOWN and the sweeper's restore keep; since\n" +
	"its updated_at when it has no created_at; none when it has neither (then it is stale). For the\n" +
	"listing a hold is stale when nothing will settle it without an operator, or nothing has for\n" +
	"-older-than:\n" +
	"  - its key has no record (forgotten, or deleted by TTL and perhaps not yet restored): STALE says\n" +
	"    check; next settle-hold -no-record, only on the terms above (stderr repeats them after the table);\n" +
	"  - its key's record is one a new request may reclaim (stale in the one-payment view): next\n" +
	"    settle-hold, as the provider's refunds of the payment's charge say;\n" +
	"  - its key's record is COMPLETED, not yet expired (its refund completed without giving the hold\n" +
	"    back: response_too_large): wait until the record expires, then settle-hold;\n" +
	"  - its key's record is UNKNOWN, or an External reservation whose lease ran out, and is older than\n" +
	"    -older-than: next reannounce, handing it to the reconciler again (forget it and settle the\n" +
	"    hold with -no-record only if it can never be reconciled).\n" +
	"Not stale: a hold whose reservation's lease is running, or whose UNKNOWN record or expired\n" +
	"reservation is younger than -older-than: the refund's request or the reconciler settles it (wait).\n" +
	"Nor a hold whose key's record cannot be decoded (RECORD unreadable), whether it is stale cannot be\n" +
	"told: next inspect, its item as it is (the command is an `aws dynamodb get-item`); -all lists it,\n" +
	"and stderr counts such holds either way.\n" +
	"A hold settled while the listing reads (its hold gone or changed when re-read after its record) is\n" +
	"left out.\n" +
	"Raw idempotency keys are never shown (they are never stored): key hashes and record IDs are."

// staleQuery is what holds -stale lists.
type staleQuery struct {
	tenant    string // "" for every tenant
	olderThan time.Duration
	all       bool
	limit     int
	asJSON    bool
}

// holdLine is a line of holds -stale: one hold of one payment, its key's
// record, whether it is stale, and what to run next.
type holdLine struct {
	Payment  string `json:"payment"`
	Tenant   string `json:"tenant"`
	KeyHash  string `json:"key_hash"`
	Record   string `json:"record"`
	Refund   string `json:"refund"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// RecordStatus is the status of the key's record, "" when there is
	// none (NoRecord).
	RecordStatus    string     `json:"record_status,omitempty"`
	RecordCreatedAt *time.Time `json:"record_created_at,omitempty"`
	RecordUpdatedAt *time.Time `json:"record_updated_at,omitempty"`
	RecordExpiresAt *time.Time `json:"record_expires_at,omitempty"`
	// Age is the record's age as of the listing (recordAge); "" when it has
	// neither timestamp.
	Age string `json:"record_age,omitempty"`
	// AgeFrom names the timestamp Age is from: created_at, or updated_at
	// when the record has no created_at.
	AgeFrom  string `json:"record_age_from,omitempty"`
	NoRecord bool   `json:"no_record,omitempty"`
	// RecordUnreadable: the key's record cannot be decoded (holdView's);
	// the line is not stale, and Next is nextInspect.
	RecordUnreadable bool `json:"record_unreadable,omitempty"`
	// Stale is the listing's stale (staleHoldsHelp), wider than holdView's.
	Stale bool `json:"stale"`
	// Next is what to run next: one of the next* constants.
	Next string `json:"next"`
	// Command is the command Next names, for this hold; "" for wait.
	Command string `json:"command,omitempty"`
	Note    string `json:"note"`

	since time.Time // what Age is from; zero when there is no record, or no timestamp
}

// staleHolds lists the holds across the payments table as q asks: a Scan
// filtered to the payments with holds (and q's tenant), projected to what
// the listing shows, every page of it up to the page bound; then each
// hold's key's item, read and shown as holds' reads apart do (holdItem,
// holdAndRecord: a record that cannot be decoded is a line, not an error
// that fails the listing); then, for a line to list or count, the hold
// again (stillHeld), leaving out a hold settled since the Scan read it.
func (t *Tool) staleHolds(ctx context.Context, q staleQuery) error {
	names := map[string]string{
		"#pk": payments.KeyAttr, "#tenant": "tenant", "#id": "id", "#currency": "currency",
		"#charge": "provider_charge_id", "#holds": payments.AttrHolds,
	}
	// size() of an absent attribute is no match: a payment never holding
	// anything, or whose holds were all settled (an empty map), is left out.
	filter := "size(#holds) > :none"
	values := map[string]types.AttributeValue{":none": &types.AttributeValueMemberN{Value: "0"}}
	if q.tenant != "" {
		filter += " AND #tenant = :tenant"
		values[":tenant"] = &types.AttributeValueMemberS{Value: q.tenant}
	}
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(t.cfg.Table("PaymentsTable")),
		ProjectionExpression:      aws.String("#pk, #tenant, #id, #currency, #charge, #holds"),
		FilterExpression:          aws.String(filter),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
	ps, err := t.scanPayments(ctx, in, "the holds of the payments it did not reach are missing from the listing and its counts")
	if err != nil {
		return err
	}
	now := t.now()
	var lines []holdLine
	read, stale, settled, unreadable := 0, 0, 0, 0
	for _, p := range ps {
		for _, hash := range slices.Sorted(maps.Keys(p.Holds)) {
			read++
			key := idempotency.Key{Tenant: p.Tenant, Hash: hash}
			item, err := t.holdItem(ctx, key)
			if err != nil {
				return err
			}
			hv, rec := t.holdAndRecord(key, p.Holds[hash], item, now)
			l := t.staleLine(p, hv, rec, now, q.olderThan)
			if !l.Stale && !l.RecordUnreadable && !q.all {
				continue
			}
			held, err := t.stillHeld(ctx, p.PK, hash, p.Holds[hash])
			if err != nil {
				return err
			}
			if !held {
				settled++
				continue
			}
			if l.Stale {
				stale++
			}
			if l.RecordUnreadable {
				unreadable++
				if !q.all {
					continue
				}
			}
			lines = append(lines, l)
		}
	}
	// A hold with no record, or a record of no age, has the zero time: first.
	slices.SortFunc(lines, func(a, b holdLine) int {
		return cmp.Or(first(a.Stale, b.Stale), a.since.Compare(b.since),
			strings.Compare(a.Payment, b.Payment), strings.Compare(a.KeyHash, b.KeyHash))
	})
	if len(lines) > q.limit {
		lines = lines[:q.limit]
	}
	err = writeListing(t, lines, q.asJSON, "PAYMENT\tKEY HASH\tAMOUNT\tRECORD\tRECORD AGE\tSTALE\tNEXT", func(l holdLine) string {
		record, age, isStale := "no record", "-", staleNo
		switch {
		case l.RecordUnreadable:
			record = "unreadable"
		case !l.NoRecord:
			record, age = l.RecordStatus, cmp.Or(l.Age, "-")
			if !l.RecordExpiresAt.After(now) {
				record += " (expired)"
			}
		}
		switch {
		case l.NoRecord:
			isStale = staleCheck
		case l.Stale:
			isStale = staleYes
		}
		return fmt.Sprintf("%s\t%s\t%d %s\t%s\t%s\t%s\t%s", l.Payment, l.KeyHash, l.Amount, l.Currency, record, age, isStale, l.Next)
	})
	if err != nil {
		return err
	}
	listed, noRecord := 0, false
	for _, l := range lines {
		if l.Stale {
			listed++
		}
		noRecord = noRecord || l.NoRecord
	}
	if noRecord && !q.asJSON {
		fmt.Fprintf(t.errOut, "STALE %s: %s\n", staleCheck, noRecordNote)
	}
	if settled > 0 {
		fmt.Fprintf(t.errOut, "%d hold(s) settled while the listing read them, left out\n", settled)
	}
	if unreadable > 0 {
		fmt.Fprintf(t.errOut, "%d hold(s) whose record cannot be read: not stale, whether they are cannot be told; "+
			"-all -json lists them, each with the command that prints its item as it is\n", unreadable)
	}
	fmt.Fprintf(t.errOut, "%d hold(s) listed, %d stale; of %d hold(s) on %d payment(s), %d stale (-older-than %s)\n",
		len(lines), listed, read, len(ps), stale, q.olderThan)
	return nil
}

// stillHeld reports whether payment pk still holds amount for the key of
// hash, read consistently after the key's record: a hold and its key's
// record change in one transaction (a refund completing or released), so a
// hold the Scan read that is gone or changed now was settled since, and the
// record read may be the settled one (or none).
func (t *Tool) stillHeld(ctx context.Context, pk, hash string, amount int64) (bool, error) {
	out, err := t.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(t.cfg.Table("PaymentsTable")),
		Key:                      map[string]types.AttributeValue{payments.KeyAttr: &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#holds.#key"),
		ExpressionAttributeNames: map[string]string{"#holds": payments.AttrHolds, "#key": hash},
	})
	if err != nil {
		return false, fmt.Errorf("payment %s: hold %s: %w", pk, hash, err)
	}
	holds, ok := out.Item[payments.AttrHolds].(*types.AttributeValueMemberM)
	if !ok {
		return false, nil
	}
	n, ok := holds.Value[hash].(*types.AttributeValueMemberN)
	return ok && n.Value == strconv.FormatInt(amount, 10), nil
}

// staleLine is holds -stale's line of p's hold hv, whose key's record is rec
// (none when hv.NoRecord or hv.RecordUnreadable), at now: stale as
// staleHoldsHelp says, a record still owning the hold once it is olderThan
// old (recordAge), or of no age; not stale when its record cannot be
// decoded, the next step to look at its item.
func (t *Tool) staleLine(p payments.Payment, hv holdView, rec idempotency.Record, now time.Time, olderThan time.Duration) holdLine {
	l := holdLine{
		Payment: p.PK, Tenant: p.Tenant, KeyHash: hv.KeyHash, Record: hv.Record, Refund: hv.Refund, Amount: hv.Amount,
		Currency: p.Currency, RecordStatus: hv.RecordStatus, RecordExpiresAt: hv.RecordExpiresAt, NoRecord: hv.NoRecord,
		RecordUnreadable: hv.RecordUnreadable,
	}
	settle := fmt.Sprintf("oncectl settle-hold (release | refunded -provider-refund ID) -hold %s -confirm %d %s", hv.KeyHash, hv.Amount, p.PK)
	if hv.NoRecord {
		l.Stale, l.Next, l.Note = true, nextSettleNoRecord, noRecordNote
		l.Command = strings.Replace(settle, " -hold ", " -no-record -hold ", 1)
		return l
	}
	if hv.RecordUnreadable {
		l.Next, l.Note = nextInspect, hv.Note
		l.Command = t.getItemCommand(idempotency.Key{Tenant: p.Tenant, Hash: hv.KeyHash}.ID())
		return l
	}
	l.RecordCreatedAt, l.RecordUpdatedAt = timeOrNil(rec.CreatedAt), timeOrNil(rec.UpdatedAt)
	since, from := recordAge(rec)
	age := now.Sub(since)
	if !since.IsZero() {
		l.since, l.AgeFrom, l.Age = since, from, age.Round(time.Second).String()
	}
	expires := rec.ExpiresAt.UTC().Format(time.RFC3339)
	charge := cmp.Or(p.ProviderChargeID, "(none)")
	switch {
	case hv.Stale:
		l.Stale, l.Next, l.Command = true, nextSettle, settle
		l.Note = fmt.Sprintf("its record is %s and expired at %s: a new request may reclaim it, nothing will complete or release the hold, "+
			"and every retry of its key answers 500; settle it as the provider's refunds of charge %s say", rec.Status, expires, charge)
	case rec.Status == idempotency.StatusCompleted:
		l.Stale, l.Next = true, nextWait
		l.Note = fmt.Sprintf("its record is COMPLETED without having given the hold back (its effects were dropped: response_too_large): "+
			"nothing will release it; settle it with `oncectl settle-hold` once the record expires, at %s", expires)
	case rec.Status == idempotency.StatusInProgress && !rec.Expired(now):
		l.Next = nextWait
		l.Note = fmt.Sprintf("its refund's request holds the lease until %s: it settles the hold, or leaves it UNKNOWN to the reconciler", expires)
	case !since.IsZero() && age < olderThan:
		l.Next = nextWait
		l.Note = fmt.Sprintf("its record is %s, %s old: the reconciler settles the hold", rec.Status, l.Age)
		if rec.Status == idempotency.StatusInProgress {
			l.Note = fmt.Sprintf("its record is an External reservation whose lease ran out at %s: the checker hands it to the reconciler, which settles the hold", expires)
		}
	default:
		old := l.Age + " old"
		if since.IsZero() {
			old = "of no known age (no created_at, no updated_at)"
		}
		l.Stale, l.Next, l.Command = true, nextReannounce, "oncectl reannounce "+hv.Record
		l.Note = fmt.Sprintf("its record is %s and %s: hand it to the reconciler again; if it can never be "+
			"reconciled (reconcile_failed, reconcile_unroutable), settle the refund at the provider (charge %s), `oncectl forget` the "+
			"record, then settle the hold with `oncectl settle-hold -no-record`", rec.Status, old, charge)
		if rec.Status == idempotency.StatusInProgress {
			l.Note += "; an External reservation whose lease ran out may have its check in a dead-letter queue (`oncectl dlq list check`)"
		}
	}
	return l
}

// recordAge is when rec's age, for the listing, is from, and that
// timestamp's attribute: its CreatedAt, when its request and so its hold
// began (a client's retry re-marking it UNKNOWN and the sweeper's restore
// keep it, and reset UpdatedAt); its UpdatedAt when it has no CreatedAt;
// the zero time when it has neither.
// (abandoned.Age, which the auditor function logs.)
func recordAge(rec idempotency.Record) (time.Time, string) { return abandoned.Age(rec) }

// timeOrNil is t in UTC, or nil when t is zero.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// first orders true before false.
func first(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}
