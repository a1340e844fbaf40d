package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/refunds"
	"github.com/oncehq/once/internal/tenant"
)

// The outcomes settle-hold writes, as the operator names them.
const (
	// settleRelease: the provider did not refund; the hold goes back into
	// refundable.
	settleRelease = "release"
	// settleRefunded: the provider refunded; the hold goes into
	// amount_refunded, and the refund item is written.
	settleRefunded = "refunded"
)

// Conditions of settle-hold's transaction, fencing it on what the operator
// was shown.
const (
	// holdCondition: the payment still holds the amount shown for the key.
	holdCondition = "#holds.#key = :amount"
	// newRefundCondition: the refunds table has no refund of the key.
	newRefundCondition = "attribute_not_exists(#pk)"
)

// noRecordNote is what holds says of a hold whose key has no record, and
// what settle-hold's -no-record acknowledges.
const noRecordNote = "its key has no record: it was forgotten (`oncectl forget`), or deleted by TTL (an External " +
	"reservation or an UNKNOWN record written before they lost their TTL, the reservation a day past its lease: " +
	"TTL deletes no other) and perhaps not yet restored by the sweeper, which restores either as " +
	"UNKNOWN, owning this hold (after the stream's lag, or, while its restore fails, until its mapping gives the " +
	"REMOVE up an hour after it: MaximumRecordAgeInSeconds, then SweeperDLQ); settle it with " +
	"`oncectl settle-hold -no-record` only after `oncectl forget` of that record, or once the sweeper has " +
	"handled the deletion: more than an hour after it, and SweeperDLQ holding no message for it (a failed " +
	"restore raises no alarm before it reaches SweeperDLQ)"

// keyHash is the shape of an idempotency key's hash (idempotency.Key.Hash).
var keyHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

// paymentHolds is what holds prints: a payment's refund figures and its
// holds.
type paymentHolds struct {
	Payment          string     `json:"payment"`
	Tenant           string     `json:"tenant"`
	Status           string     `json:"status"`
	Currency         string     `json:"currency"`
	Amount           int64      `json:"amount"`
	AmountRefunded   int64      `json:"amount_refunded"`
	Refundable       int64      `json:"refundable"`
	ProviderChargeID string     `json:"provider_charge_id,omitempty"`
	Holds            []holdView `json:"holds"`
}

// holdView is one hold: its key's hash and record ID, the refund ID its key
// names, its amount, and the key's idempotency record, if any.
type holdView struct {
	KeyHash string `json:"key_hash"`
	Record  string `json:"record"`
	Refund  string `json:"refund"`
	Amount  int64  `json:"amount"`
	// RecordStatus is the status of the key's record, "" when there is
	// none.
	RecordStatus    string     `json:"record_status,omitempty"`
	RecordExpiresAt *time.Time `json:"record_expires_at,omitempty"`
	// Stale: the key's record is one a new request may reclaim
	// (idempotency.Record.Reclaimable): nothing will ever complete or
	// release the hold.
	Stale bool `json:"stale"`
	// NoRecord: the key has no record. The hold is stale if the record was
	// forgotten, or if TTL deleted it (a legacy item: an External
	// reservation or an UNKNOWN record written with a TTL attribute, before
	// they lost it) and the sweeper has processed the deletion without
	// restoring it; until then the sweeper may restore it (Note says so).
	NoRecord bool `json:"no_record,omitempty"`
	// RecordUnreadable: the key has a record that cannot be decoded
	// (dynamo.RecordFromItem fails; Note says why). Whether the hold is
	// stale cannot be told: it is shown, not stale, so that the operator
	// looks at its item as it is (Note names the `aws dynamodb get-item`:
	// `oncectl show` decodes it, and fails), and the other holds are shown
	// too.
	RecordUnreadable bool   `json:"record_unreadable,omitempty"`
	Note             string `json:"note,omitempty"`
}

// paymentArg adds -tenant and -payment to fs and returns what, given the
// arguments left once the flags are parsed, names the payment: PAYMENT
// (tenant#pay_id) as the one argument, or -tenant and -payment.
func paymentArg(fs *flag.FlagSet) func(args []string) (tnt, id string, err error) {
	tenantFlag := fs.String("tenant", "", "the payment's tenant, with -payment")
	idFlag := fs.String("payment", "", "the payment's ID (pay_...), with -tenant")
	return func(args []string) (string, string, error) {
		tnt, id := *tenantFlag, *idFlag
		switch {
		case len(args) == 1 && tnt == "" && id == "":
			var ok bool
			if tnt, id, ok = strings.Cut(args[0], "#"); !ok {
				tnt, id = "", ""
			}
		case len(args) == 0 && tnt != "" && id != "":
		default:
			return "", "", usageError{fs, "give a payment (tenant#pay_id), or -tenant and -payment"}
		}
		if !tenant.Valid(tnt) || !payments.ValidID(id) {
			return "", "", usageError{fs, fmt.Sprintf("%q is not a payment (tenant#pay_id, as `oncectl pending` lists them)", tnt+"#"+id)}
		}
		return tnt, id, nil
	}
}

// holdsReads bounds readHolds' attempts at a consistent view.
const holdsReads = 3

// maxSnapshotHolds is how many holds readHolds reads in one
// TransactGetItems with their payment (DynamoDB's limit is 100 items).
const maxSnapshotHolds = 99

// errHoldsChanging: the payment's holds changed during each of readHolds'
// attempts.
var errHoldsChanging = errors.New("its holds changed while they were read; run the command again")

// readHolds reads tenant's payment id and the record of each of its holds'
// keys, as of now, as one snapshot. A hold and its key's record change in
// one transaction (a refund reserved, completing or released), so reads
// one after the other could show a hold beside a record that never went
// with it (a release and a new reservation of the same key between the
// reads restore the payment exactly). It reads the payment, then the
// payment and its holds' records in one TransactGetItems, which no write
// transaction interleaves with; when the snapshot's payment holds a key
// the first read did not (a refund reserved meanwhile), it reads again
// with that key, holdsReads times at most, then gives up with
// errHoldsChanging. A payment with more than maxSnapshotHolds holds is read
// as readHoldsApart does.
func (t *Tool) readHolds(ctx context.Context, tnt, id string, now time.Time) (paymentHolds, error) {
	p, err := payments.NewTable(t.db, t.cfg.Table("PaymentsTable")).Get(ctx, tnt, id)
	if errors.Is(err, payments.ErrNotFound) {
		return paymentHolds{}, fmt.Errorf("no payment %s", payments.PK(tnt, id))
	}
	if err != nil {
		return paymentHolds{}, err
	}
	for range holdsReads {
		if len(p.Holds) > maxSnapshotHolds {
			return t.readHoldsApart(ctx, tnt, id, p, now)
		}
		snap, records, err := t.snapshot(ctx, tnt, id, slices.Sorted(maps.Keys(p.Holds)))
		if err != nil {
			return paymentHolds{}, err
		}
		v, complete := t.holdsView(snap, records, now)
		if complete {
			return v, nil
		}
		p = snap
	}
	return paymentHolds{}, fmt.Errorf("payment %s: %w", payments.PK(tnt, id), errHoldsChanging)
}

// snapshot reads tenant's payment id and the records of the keys of
// hashes in one TransactGetItems: the payment as it is, and each key's
// item (nil when there is none) by hash, projected to what holdsView shows
// (so that the read stays far below the transaction's 4 MB whatever the
// records' answers). A read cancelled only by writes in flight on its
// items (TransactionConflict) is tried again after a short pause,
// holdsReads times at most, then is errHoldsChanging; one cancelled for
// another reason (throttled) is that error.
func (t *Tool) snapshot(ctx context.Context, tnt, id string, hashes []string) (payments.Payment, map[string]map[string]types.AttributeValue, error) {
	items := []types.TransactGetItem{{Get: &types.Get{
		TableName: aws.String(t.cfg.Table("PaymentsTable")),
		Key:       map[string]types.AttributeValue{payments.KeyAttr: &types.AttributeValueMemberS{Value: payments.PK(tnt, id)}},
	}}}
	for _, h := range hashes {
		items = append(items, types.TransactGetItem{Get: &types.Get{
			TableName:                aws.String(t.cfg.Table("IdempotencyTable")),
			Key:                      map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: idempotency.Key{Tenant: tnt, Hash: h}.ID()}},
			ProjectionExpression:     aws.String(holdRecordProjection),
			ExpressionAttributeNames: holdRecordNames,
		}})
	}
	var out *dynamodb.TransactGetItemsOutput
	var err error
	for attempt := range holdsReads {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return payments.Payment{}, nil, ctx.Err()
			case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
			}
		}
		out, err = t.db.TransactGetItems(ctx, &dynamodb.TransactGetItemsInput{TransactItems: items})
		if !conflicted(err) {
			break
		}
	}
	switch {
	case conflicted(err):
		return payments.Payment{}, nil, fmt.Errorf("payment %s: %w (%v)", payments.PK(tnt, id), errHoldsChanging, err)
	case err != nil:
		return payments.Payment{}, nil, fmt.Errorf("payment %s: %w", payments.PK(tnt, id), err)
	case len(out.Responses) != len(items):
		return payments.Payment{}, nil, fmt.Errorf("payment %s: TransactGetItems answered %d items of %d", payments.PK(tnt, id), len(out.Responses), len(items))
	case out.Responses[0].Item == nil:
		return payments.Payment{}, nil, fmt.Errorf("no payment %s", payments.PK(tnt, id))
	}
	var p payments.Payment
	if err := attributevalue.UnmarshalMap(out.Responses[0].Item, &p); err != nil {
		return payments.Payment{}, nil, fmt.Errorf("payment %s: %w", payments.PK(tnt, id), err)
	}
	records := make(map[string]map[string]types.AttributeValue, len(hashes))
	for i, h := range hashes {
		records[h] = out.Responses[i+1].Item
	}
	return p, records, nil
}

// holdRecordProjection is what holds reads of a hold's key's record, in
// snapshot and in holdItem alike, so that both decode the same item:
// what dynamo.RecordFromItem needs, and holdFromItem shows, with the
// timestamps holds -stale ages a record by (recordAge).
const holdRecordProjection = "#pk, #tenant, #status, #external, #expires_ms, #created, #updated"

// holdRecordNames are the names of holdRecordProjection.
var holdRecordNames = map[string]string{
	"#pk": dynamo.AttrPK, "#tenant": dynamo.AttrTenant, "#status": dynamo.AttrStatus,
	"#external": dynamo.AttrExternal, "#expires_ms": dynamo.AttrExpiresAtMS,
	"#created": dynamo.AttrCreatedAt, "#updated": dynamo.AttrUpdatedAt,
}

// conflicted reports whether err is a transaction cancelled only because
// of writes in flight on its items: every reason TransactionConflict, or
// None for the items not involved.
func conflicted(err error) bool {
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) || len(canceled.CancellationReasons) == 0 {
		return false
	}
	conflict := false
	for _, r := range canceled.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "TransactionConflict":
			conflict = true
		case "None", "":
		default:
			return false
		}
	}
	return conflict
}

// figures is holds' view of payment p's refund figures, with no holds yet.
func figures(p payments.Payment) paymentHolds {
	return paymentHolds{
		Payment: payments.PK(p.Tenant, p.ID), Tenant: p.Tenant, Status: string(p.Status), Currency: p.Currency, Amount: p.Amount,
		AmountRefunded: p.AmountRefunded, Refundable: p.Refundable, ProviderChargeID: p.ProviderChargeID, Holds: []holdView{},
	}
}

// holdsView is holds' view of payment p and its holds, whose keys' items
// are records by hash (a nil item: no record), at now; complete is false
// when p holds a key whose item was not read.
func (t *Tool) holdsView(p payments.Payment, records map[string]map[string]types.AttributeValue, now time.Time) (paymentHolds, bool) {
	v := figures(p)
	for _, h := range slices.Sorted(maps.Keys(p.Holds)) {
		item, read := records[h]
		if !read {
			return paymentHolds{}, false
		}
		v.Holds = append(v.Holds, t.holdFromItem(idempotency.Key{Tenant: p.Tenant, Hash: h}, p.Holds[h], item, now))
	}
	return v, true
}

// holdFromItem is holds' view of key's hold of amount at now, given the
// key's item as read (holdRecordProjection; nil: no record). Both of
// readHolds' paths, settle-hold and holds -stale build their views with
// it. An item that dynamo.RecordFromItem cannot decode is reported,
// neither hidden nor an error that would fail the whole listing: the hold
// is shown with RecordUnreadable, the decoding error in its note and the
// command that reads the item as it is (getItemCommand).
func (t *Tool) holdFromItem(key idempotency.Key, amount int64, item map[string]types.AttributeValue, now time.Time) holdView {
	hv, _ := t.holdAndRecord(key, amount, item, now)
	return hv
}

// holdAndRecord is holdFromItem, and the record decoded from item: the
// zero Record when there is none (NoRecord) or it cannot be decoded
// (RecordUnreadable).
func (t *Tool) holdAndRecord(key idempotency.Key, amount int64, item map[string]types.AttributeValue, now time.Time) (holdView, idempotency.Record) {
	hv := holdView{KeyHash: key.Hash, Record: key.ID(), Refund: refunds.ID(key), Amount: amount}
	if item == nil {
		hv.NoRecord, hv.Note = true, noRecordNote
		return hv, idempotency.Record{}
	}
	rec, err := dynamo.RecordFromItem(item)
	if err != nil {
		hv.RecordUnreadable = true
		hv.Note = fmt.Sprintf("its key's record cannot be read (%v): whether the hold is stale cannot be told; look at its item as it is: %s",
			err, t.getItemCommand(key.ID()))
		return hv, idempotency.Record{}
	}
	expires := rec.ExpiresAt.UTC()
	hv.RecordStatus, hv.RecordExpiresAt, hv.Stale = string(rec.Status), &expires, rec.Reclaimable(now)
	return hv, rec
}

// getItemCommand is the AWS CLI command that prints the item of the
// record ID id (its partition key; abandoned.ItemID for an item that does
// not decode) in the idempotency table as it is, without decoding it: the
// one builder of it for holds and unknown. The key is JSON (json.Marshal)
// quoted for a POSIX shell (shellQuote): an item written by hand may have
// a pk holding ' or ", which must neither break the pasted command nor run
// anything.
func (t *Tool) getItemCommand(id string) string {
	key, _ := json.Marshal(map[string]map[string]string{dynamo.AttrPK: {"S": id}}) // strings always marshal
	return fmt.Sprintf(`aws dynamodb get-item --table-name %s --key %s`, shellQuote(t.cfg.Table("IdempotencyTable")), shellQuote(string(key)))
}

// shellQuote returns s as one word for a POSIX shell: in single quotes,
// each single quote in it ending the quoted part, escaped with a
// backslash, and opening the next; s itself when it holds only characters
// no shell reads specially.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// holdItem reads key's record as holds shows it: one consistent GetItem,
// projected as snapshot projects it; nil when there is none.
func (t *Tool) holdItem(ctx context.Context, key idempotency.Key) (map[string]types.AttributeValue, error) {
	out, err := t.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(t.cfg.Table("IdempotencyTable")),
		Key:                      map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: key.ID()}},
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String(holdRecordProjection),
		ExpressionAttributeNames: holdRecordNames,
	})
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", key.ID(), err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// readHoldsApart is readHolds for a payment with more holds than one
// TransactGetItems reads: it reads the record of each hold's key
// (holdItem), then the payment again, and returns the view only when the
// payment's refund figures and holds are as the read before found them,
// holdsReads times at most (a release and a new reservation of one key
// between the reads would go unseen).
func (t *Tool) readHoldsApart(ctx context.Context, tnt, id string, p payments.Payment, now time.Time) (paymentHolds, error) {
	table := payments.NewTable(t.db, t.cfg.Table("PaymentsTable"))
	for range holdsReads {
		v := figures(p)
		for _, h := range slices.Sorted(maps.Keys(p.Holds)) {
			key := idempotency.Key{Tenant: tnt, Hash: h}
			item, err := t.holdItem(ctx, key)
			if err != nil {
				return paymentHolds{}, err
			}
			v.Holds = append(v.Holds, t.holdFromItem(key, p.Holds[h], item, now))
		}
		again, err := table.Get(ctx, tnt, id)
		if err != nil {
			return paymentHolds{}, err
		}
		if sameHolds(p, again) {
			return v, nil
		}
		p = again
	}
	return paymentHolds{}, fmt.Errorf("payment %s: %w", payments.PK(tnt, id), errHoldsChanging)
}

// sameHolds reports whether a and b, two reads of one payment, have the
// same refund figures and holds.
func sameHolds(a, b payments.Payment) bool {
	return a.Amount == b.Amount && a.AmountRefunded == b.AmountRefunded && a.Refundable == b.Refundable &&
		a.Status == b.Status && maps.Equal(a.Holds, b.Holds)
}

// holds prints a payment's holds, each with the state of its key's record;
// with -stale, the stale holds across the payments table (staleHolds).
func (t *Tool) holds(ctx context.Context, args []string) error {
	fs := t.flags("holds", "(PAYMENT | -tenant T -payment P)\n       oncectl holds -stale [-all] [-tenant T] [-older-than D] [-limit N] [-json]",
		"Show a payment's refund figures and holds (PAYMENT is tenant#pay_id): each hold's key hash, record ID,\n"+
			"the refund ID its key names, its amount, and the key's idempotency record. A hold whose key's record\n"+
			"a new request may reclaim (an expired COMPLETED one) is stale: nothing will ever complete or release\n"+
			"it, and every retry of its key answers 500 until `oncectl settle-hold` settles it. A hold whose key\n"+
			"has no record is shown \"no_record\": the record was forgotten (`oncectl forget`), or deleted by TTL\n"+
			"(an External reservation a day past its lease, or an UNKNOWN record, written before they lost their\n"+
			"TTL) and perhaps not yet restored by the sweeper (as UNKNOWN, owning the hold): settle it, with\n"+
			"-no-record, only after `oncectl forget` of that record or once the sweeper has handled the\n"+
			"deletion (more than an hour after it, and SweeperDLQ holding no message for it). A hold whose\n"+
			"key's record cannot be decoded is shown \"record_unreadable\", the error in its note, and counted\n"+
			"on stderr: whether it is stale cannot be told (its note names the `aws dynamodb get-item` that\n"+
			"prints its item as it is: `oncectl show` decodes it, and fails); the others are shown as usual.\n"+
			"\n"+staleHoldsHelp)
	payment := paymentArg(fs)
	fs.Lookup("tenant").Usage = "the payment's tenant, with -payment; with -stale, only this tenant's holds"
	listing := fs.Bool("stale", false, "list the stale holds of every payment (a Scan of the payments table), not one payment's")
	all := fs.Bool("all", false, "with -stale: list every hold found, the stale ones marked")
	olderThan := fs.Duration("older-than", staleHoldAge, "with -stale: a hold whose record still owns it (UNKNOWN, or a reservation past its lease)\nis stale once the record is this old (since its created_at, when its request began)")
	limit := fs.Int("limit", 100, "with -stale: list at most this many")
	asJSON := fs.Bool("json", false, "with -stale: one JSON object per line")
	if err := t.parse(fs, args, -1); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *listing {
		tnt := fs.Lookup("tenant").Value.String()
		switch {
		case fs.NArg() > 0 || set["payment"]:
			return usageError{fs, "-stale lists the holds of every payment: give no payment (-tenant keeps one tenant's)"}
		case tnt != "" && !tenant.Valid(tnt):
			return usageError{fs, fmt.Sprintf("-tenant %q is not a tenant", tnt)}
		case *limit < 1:
			return usageError{fs, "-limit must be positive"}
		case *olderThan < 0:
			return usageError{fs, "-older-than must not be negative"}
		}
		return t.staleHolds(ctx, staleQuery{tenant: tnt, olderThan: *olderThan, all: *all, limit: *limit, asJSON: *asJSON})
	}
	for _, name := range []string{"all", "older-than", "limit", "json"} {
		if set[name] {
			return usageError{fs, fmt.Sprintf("-%s goes with -stale", name)}
		}
	}
	tnt, id, err := payment(fs.Args())
	if err != nil {
		return err
	}
	v, err := t.readHolds(ctx, tnt, id, t.now())
	if err != nil {
		return err
	}
	if err := t.writeIndented(v); err != nil {
		return err
	}
	reclaimable, none, unreadable := 0, 0, 0
	for _, h := range v.Holds {
		if h.Stale {
			reclaimable++
		}
		if h.NoRecord {
			none++
		}
		if h.RecordUnreadable {
			unreadable++
		}
	}
	fmt.Fprintf(t.errOut, "%d hold(s), %d stale, %d with no record of its key", len(v.Holds), reclaimable, none)
	if unreadable > 0 {
		fmt.Fprintf(t.errOut, ", %d whose record cannot be read (see its note)", unreadable)
	}
	fmt.Fprintln(t.errOut)
	return nil
}

// settleView is what settle-hold prints: the hold as holds shows it, the
// outcome asked for, and whether it was written.
type settleView struct {
	holdView
	Payment          string `json:"payment"`
	Outcome          string `json:"outcome"`
	ProviderRefundID string `json:"provider_refund_id,omitempty"`
	// Settled: whether the settlement was written; nil (left out) when
	// that is not known (SettledUnknown).
	Settled *bool `json:"settled,omitempty"`
	// SettledUnknown: the write failed without saying whether DynamoDB
	// made it (a timeout, a connection lost after the request was sent:
	// not a cancellation, which writes nothing); `oncectl holds` tells.
	SettledUnknown bool `json:"settled_unknown,omitempty"`
	// ChangedMeanwhile: the write was cancelled, nothing written, because
	// the hold or its key's record changed after settle-hold read them, a
	// refund of the key exists, or another write was in flight on them
	// (stderr says which); the hold is then shown as read again after the
	// refusal (holdAfterRefusal), not as it was read before.
	ChangedMeanwhile bool `json:"changed_meanwhile,omitempty"`
	// RereadFailed: with ChangedMeanwhile, the hold could not be read
	// again after the refusal: it is shown as read before the write, which
	// may no longer be true (Note says so).
	RereadFailed bool `json:"reread_failed,omitempty"`
}

// settleHold settles a stale hold as the operator found the provider: the
// amount back into refundable (release) or into amount_refunded with the
// refund item written (refunded). It needs -confirm with the amount shown,
// and -no-record when the key has no record, and writes one transaction
// fenced on the hold and on its key having no live record.
func (t *Tool) settleHold(ctx context.Context, args []string) error {
	fs := t.flags("settle-hold", "(release | refunded -provider-refund ID) -hold KEY-HASH [-no-record] [-confirm AMOUNT] (PAYMENT | -tenant T -payment P)",
		"Settle a stale hold (see `oncectl holds`) as the provider's refunds of the payment's charge say:\n"+
			"  release   the provider did not refund under the key: the amount goes back into refundable, and a\n"+
			"            retry of the key runs the refund again;\n"+
			"  refunded  the provider refunded: the amount goes into amount_refunded and the refund item is\n"+
			"            written (the refund ID the key names, -provider-refund, the payment's currency, created\n"+
			"            now; reason and metadata are not known), so that GET shows it and a retry of the key\n"+
			"            answers 422 idempotency_key_reused instead of refunding again.\n"+
			"Without -confirm it only shows the hold; -confirm takes the amount shown. A hold whose key has no\n"+
			"record is settled only with -no-record: pass it only after `oncectl forget` of that record, or once\n"+
			"the sweeper has handled its deletion by TTL (more than an hour after it, the sweeper mapping's\n"+
			"MaximumRecordAgeInSeconds, and SweeperDLQ holding no message for it). Until then the\n"+
			"sweeper may restore the record as UNKNOWN, owning the hold, and a settlement before would leave it\n"+
			"unresolvable (refunded) or give back an amount the provider refunded (release). The write is one\n"+
			"transaction, conditioned on the hold still being that amount and on no live record of its key:\n"+
			"a hold that changed, or whose key has a live record (it is not stale), is left as it is, and\n"+
			"what it prints is the hold read again then, marked changed_meanwhile (reread_failed, the hold as\n"+
			"read before, if it cannot be read again); stderr says why the write was refused. A write\n"+
			"cancelled because another was in flight wrote nothing either: look again, and run it again. A\n"+
			"write that failed otherwise (a timeout) may have been made: it prints settled_unknown, no\n"+
			"settled; `oncectl holds` tells. It reads the payment and the key's record as one snapshot, as\n"+
			"holds does, and refuses a hold whose key's record cannot be decoded.")
	payment := paymentArg(fs)
	hash := fs.String("hold", "", "the hold's key hash, as holds shows it")
	confirm := fs.Int64("confirm", 0, "the hold's amount, as shown: settle it")
	providerRefund := fs.String("provider-refund", "", "with refunded: the provider's ID of the refund made under the key")
	noRecord := fs.Bool("no-record", false, "settle a hold whose key has no record: only after 'oncectl forget' of that record,\n"+
		"or once the sweeper has handled its deletion by TTL (more than an hour after it, and SweeperDLQ\n"+
		"holding no message for it)")
	if err := t.parse(fs, args, -1); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageError{fs, "want release or refunded"}
	}
	outcome := fs.Arg(0)
	if outcome != settleRelease && outcome != settleRefunded {
		return usageError{fs, fmt.Sprintf("%q is not an outcome: want release or refunded", outcome)}
	}
	*providerRefund = strings.TrimSpace(*providerRefund)
	tnt, id, err := payment(fs.Args()[1:])
	switch {
	case err != nil:
		return err
	case !keyHash.MatchString(*hash):
		return usageError{fs, "-hold wants a key hash (64 hex characters), as holds shows it"}
	case outcome == settleRefunded && *providerRefund == "":
		return usageError{fs, "refunded wants -provider-refund: the provider's ID of the refund"}
	case outcome == settleRelease && *providerRefund != "":
		return usageError{fs, "release takes no -provider-refund: the provider did not refund"}
	case *confirm < 0:
		return usageError{fs, "-confirm wants the amount shown"}
	}
	key := idempotency.Key{Tenant: tnt, Hash: *hash}
	now := t.now()
	// The payment and the key's record as one snapshot, as holds reads
	// them: read apart, a hold settled between the two reads would be
	// refused as one whose key has no record, or a live one.
	p, records, err := t.snapshot(ctx, tnt, id, []string{key.Hash})
	if err != nil {
		return err
	}
	amount, held := p.Holds[key.Hash]
	if !held {
		return fmt.Errorf("payment %s holds nothing for key hash %s (see `oncectl holds %s`)", p.PK, key.Hash, p.PK)
	}
	hv := t.holdFromItem(key, amount, records[key.Hash], now)
	v := settleView{holdView: hv, Payment: p.PK, Outcome: outcome, ProviderRefundID: *providerRefund, Settled: new(bool)}
	refusal := fmt.Sprintf("the hold of %s on %s is not settled", key.Hash, p.PK)
	switch {
	case hv.RecordUnreadable:
		err = fmt.Errorf("%s: %s", refusal, hv.Note)
	case hv.NoRecord && !*noRecord:
		err = fmt.Errorf("%s: %s", refusal, strings.Replace(noRecordNote, "`oncectl settle-hold -no-record`", "-no-record", 1))
	case !hv.Stale && !hv.NoRecord:
		err = fmt.Errorf("%s: it is not stale: its key has a live record, %s until %s; its refund or the reconciler settles it (see `oncectl show %s`)",
			refusal, hv.RecordStatus, hv.RecordExpiresAt.Format(time.RFC3339), key.ID())
	case *confirm == 0:
		err = fmt.Errorf("%s: settled as %s, it writes %s for good (check the provider's refunds of charge %s first); confirm with -confirm %d",
			refusal, outcome, settleWhat(outcome, amount), p.ProviderChargeID, amount)
	case *confirm != amount:
		err = fmt.Errorf("%s: it is %d now, not %d: it changed since it was shown; look at it again", refusal, amount, *confirm)
	default:
		var refused bool
		refused, err = t.settleFenced(ctx, key, p, amount, outcome, *providerRefund, now)
		switch {
		case err == nil:
			*v.Settled = true
		case refused:
			v.ChangedMeanwhile = true
			v.holdView, v.RereadFailed = t.holdAfterRefusal(ctx, key, p, hv, t.now())
		default:
			v.Settled, v.SettledUnknown = nil, true
			err = fmt.Errorf("%w: whether it was written is unknown (DynamoDB may have made it before the error); "+
				"look with `oncectl holds %s` before running settle-hold again", err, p.PK)
		}
	}
	if werr := t.writeJSON(v); werr != nil {
		return errors.Join(err, werr)
	}
	if err != nil {
		return err
	}
	slog.New(slog.NewJSONHandler(t.errOut, nil)).Info("hold settled by an operator",
		"payment", p.PK, "tenant", tnt, "key_hash", key.Hash, "amount", amount, "outcome", outcome,
		"refund", hv.Refund, "provider_refund_id", *providerRefund, "record_status", hv.RecordStatus, "no_record", hv.NoRecord)
	return nil
}

// settleWhat says what settling a hold of amount as outcome writes.
func settleWhat(outcome string, amount int64) string {
	if outcome == settleRelease {
		return fmt.Sprintf("refundable += %d (nothing was refunded: a retry of the key refunds again)", amount)
	}
	return fmt.Sprintf("amount_refunded += %d and the refund item", amount)
}

// settleFenced writes the settlement of key's hold of amount on p as
// outcome: one TransactWriteItems of the payment's Update, conditioned on
// the hold still being amount, a ConditionCheck that no record holds the key
// at now, and, for refunded, the refund item, conditioned on there being
// none. It is not retried. A cancelled transaction wrote nothing: refused
// is true, and the error says what each failed condition's item is now,
// or that another write was in flight (TransactionConflict). Any other
// error leaves refused false: the write may have been made.
func (t *Tool) settleFenced(ctx context.Context, key idempotency.Key, p payments.Payment, amount int64, outcome, providerRefund string, now time.Time) (refused bool, err error) {
	names := map[string]string{"#holds": payments.AttrHolds, "#key": key.Hash}
	values := map[string]types.AttributeValue{":amount": &types.AttributeValueMemberN{Value: fmt.Sprint(amount)}}
	update := "SET #refundable = #refundable + :amount REMOVE #holds.#key"
	names["#refundable"] = payments.AttrRefundable
	if outcome == settleRefunded {
		delete(names, "#refundable")
		update = "SET #refunded = if_not_exists(#refunded, :zero) + :amount REMOVE #holds.#key"
		names["#refunded"] = payments.AttrAmountRefunded
		values[":zero"] = &types.AttributeValueMemberN{Value: "0"}
	}
	// No record holds the key: the store's own reclaim rule
	// (idempotency.Record.Reclaimable). An UNKNOWN record, or an External
	// reservation, expired or not, still owns its hold.
	free := dynamo.ReclaimCheck(t.cfg.Table("IdempotencyTable"), key, now)
	items := []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                           aws.String(t.cfg.Table("PaymentsTable")),
			Key:                                 map[string]types.AttributeValue{payments.KeyAttr: &types.AttributeValueMemberS{Value: p.PK}},
			UpdateExpression:                    aws.String(update),
			ConditionExpression:                 aws.String(holdCondition),
			ExpressionAttributeNames:            names,
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
		{ConditionCheck: &free},
	}
	refundID := refunds.ID(key)
	if outcome == settleRefunded {
		item, err := attributevalue.MarshalMap(refunds.Refund{
			PK: refunds.PK(key.Tenant, refundID), ID: refundID, Tenant: key.Tenant, Payment: p.ID, Amount: amount,
			Currency: strings.ToLower(p.Currency), Status: refunds.Status, ProviderRefundID: providerRefund,
			Created: time.Unix(now.Unix(), 0).UTC(),
		})
		if err != nil {
			return false, fmt.Errorf("refund %s: %w", refundID, err)
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName:                           aws.String(t.cfg.Table("RefundsTable")),
			Item:                                item,
			ConditionExpression:                 aws.String(newRefundCondition),
			ExpressionAttributeNames:            map[string]string{"#pk": refunds.KeyAttr},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}})
	}
	_, err = t.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var cancelled *types.TransactionCanceledException
	if !errors.As(err, &cancelled) {
		if err != nil {
			return false, fmt.Errorf("settle the hold of %s on %s: %w", key.Hash, p.PK, err)
		}
		return false, nil
	}
	refusal := fmt.Sprintf("the hold of %s on %s is not settled", key.Hash, p.PK)
	var errs []error
	for i, r := range cancelled.CancellationReasons {
		if aws.ToString(r.Code) != "ConditionalCheckFailed" {
			continue
		}
		switch i {
		case 0:
			errs = append(errs, fmt.Errorf("%s: %s", refusal, holdNow(r.Item, key, amount)))
		case 1:
			status := "a record"
			if rec, err := dynamo.RecordFromItem(r.Item); err == nil {
				status = fmt.Sprintf("%s until %s", rec.Status, rec.ExpiresAt.UTC().Format(time.RFC3339))
			}
			errs = append(errs, fmt.Errorf("%s: its key has a live record now, %s: it is not stale; look at it again (`oncectl show %s`)",
				refusal, status, key.ID()))
		case 2:
			errs = append(errs, fmt.Errorf("%s: refund %s exists already", refusal, refundID))
		}
	}
	if len(errs) == 0 {
		codes := make([]string, len(cancelled.CancellationReasons))
		for i, r := range cancelled.CancellationReasons {
			codes[i] = cmp.Or(aws.ToString(r.Code), "None")
		}
		return true, fmt.Errorf("%s: its write was cancelled, nothing written (%s): another write was in flight on the payment, "+
			"the key's record or the refund (or DynamoDB throttled it); look at it again (`oncectl holds %s`), and settle it again if it is "+
			"still stale: %w", refusal, strings.Join(codes, ", "), p.PK, err)
	}
	return true, errors.Join(errs...)
}

// rereadNote begins the note of a hold holdAfterRefusal read again.
const rereadNote = "read again after the write was refused (stderr says why)"

// holdAfterRefusal is key's hold on p at now, after settleFenced's write
// was refused because something changed since settle-hold read the hold
// as before: read again as settle-hold reads it (the payment and the key's
// record, one snapshot), so that what settle-hold prints is what is true
// when it refuses, not what it read before; its note begins rereadNote. A
// hold gone (settled meanwhile) is shown with amount 0 and its key's
// record as it is now. When it cannot be read again, it is before, its
// note saying so, and rereadFailed is true: an amount 0 would say the hold
// is gone.
func (t *Tool) holdAfterRefusal(ctx context.Context, key idempotency.Key, p payments.Payment, before holdView, now time.Time) (hv holdView, rereadFailed bool) {
	cur, records, err := t.snapshot(ctx, key.Tenant, p.ID, []string{key.Hash})
	if err != nil {
		hv = before
		hv.Note = fmt.Sprintf("the write was refused and the hold could not be read again (%v): this is the hold as read before the write, "+
			"which may no longer be true; look at it again with `oncectl holds %s`", err, p.PK)
		if before.Note != "" {
			hv.Note += "; as read before: " + before.Note
		}
		return hv, true
	}
	amount, held := cur.Holds[key.Hash]
	hv = t.holdFromItem(key, amount, records[key.Hash], now)
	note := hv.Note
	if !held {
		note = "the payment holds nothing for the key now: it was settled meanwhile (its refund completed or was released, or another operator settled it)"
		if hv.RecordUnreadable {
			note += "; " + hv.Note
		}
		hv.Stale = false
	}
	hv.Note = rereadNote
	if note != "" {
		hv.Note += ": " + note
	}
	return hv, false
}

// holdNow says what key's hold on the payment item is, given that it is no
// longer amount.
func holdNow(item map[string]types.AttributeValue, key idempotency.Key, amount int64) string {
	if len(item) == 0 {
		return "the payment is gone"
	}
	var p payments.Payment
	if err := attributevalue.UnmarshalMap(item, &p); err != nil {
		return "it changed meanwhile"
	}
	now, held := p.Holds[key.Hash]
	if !held {
		return "it is gone: settled meanwhile (its refund completed or was released, or another operator settled it)"
	}
	return fmt.Sprintf("it changed meanwhile, to %d (not %d); look at it again", now, amount)
}

// writeIndented writes v as indented JSON, as show does.
func (t *Tool) writeIndented(v any) error {
	enc := json.NewEncoder(t.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
