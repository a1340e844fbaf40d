package operator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/abandoned"
)

// lostCheckAfter is how long past its expiry an UNKNOWN record, or an
// External reservation past its lease, must be for unknown to call its
// check lost (abandoned.LostCheckAfter, shared with the auditor function).
const lostCheckAfter = abandoned.LostCheckAfter

// unknown lists the UNKNOWN records, and the External reservations whose
// check is lost (listUnknown): a Scan of the idempotency table with a
// filter, every page of it (up to maxScanPages), so that the -limit records
// listed are the oldest, by their created_at (recordAge: a redrive, the
// Checker's or a client's, resets updated_at, not created_at).
func (t *Tool) unknown(ctx context.Context, args []string) error {
	fs := t.flags("unknown", "[-tenant T] [-limit N] [-json]",
		"List the records left UNKNOWN, oldest first (by created_at, when their request began: a redrive\n"+
			"resets updated_at, not it; by updated_at when a record has no created_at), by their ID\n"+
			"(tenant#key-hash). CHECK says lost for a record past its expiry by more than "+lostCheckAfter.String()+":\n"+
			"its recovery check, due at its expiry, never redrove it (a check in the check dead-letter queue,\n"+
			"or the Scheduler's stream record in the sweeper's): `oncectl reannounce` re-arms it. External\n"+
			"reservations (IN_PROGRESS) past their lease by as much are listed too, lost: their check never\n"+
			"handed them to the reconciler; and those whose lease ran out whose item still has the TTL attribute\n"+
			"(written before the upgrade that took it away), which reannounce -lost re-arms as well.\n"+
			"A lost check may still come late (the sweeper's stream retries last up to an hour): re-arming the\n"+
			"record is harmless, the late check is fenced on the lease token reannounce replaces.\n"+
			"AGE is from created_at (or updated_at), for UNKNOWN records and reservations alike.\n"+
			"COUNTED says yes for a record the auditor function counts (abandoned_records, AbandonedRecordsAlarm):\n"+
			"an UNKNOWN record lost or legacy (a legacy one shows CHECK armed), a reservation lost and last written\n"+
			"more than "+(abandoned.StreamMaxRecordAge+abandoned.LostCheckMargin).String()+" ago. COUNTED is of the moment: a reservation lost but written\n"+
			"less than that ago, or a legacy one just past its lease, says no and is counted later unless re-armed.\n"+
			"AbandonedRecordsAlarm clears (two days after the last sighting) once, without -tenant and with a -limit\n"+
			"above what it reads, no row says COUNTED yes, none CHECK lost, none is IN_PROGRESS (each listed is lost or\n"+
			"legacy: what reannounce -lost re-arms), and no unreadable item is skipped.\n"+
			"The counts on stderr are of every record read, before -limit cuts the listing.\n"+
			"-json prints one JSON object a row on stdout, adding created_at, updated_at, check_lost and counted;\n"+
			"the counts, and the cut (\"M read, N listed (raise -limit)\"), still go to stderr.")
	tenant := fs.String("tenant", "", "only this tenant's records")
	limit := fs.Int("limit", 100, "list at most this many")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if err := t.parse(fs, args, 0); err != nil {
		return err
	}
	if *limit < 1 {
		return usageError{fs, "-limit must be positive"}
	}
	now := t.now()
	recs, unreadable, err := t.listUnknown(ctx, *tenant, now)
	if err != nil {
		return err
	}
	// Counted over every record read, before the cut.
	rows := make([]recordSummary, len(recs))
	lost, reservations, counted := 0, 0, 0
	for i, rec := range recs {
		rows[i] = summary(rec, now)
		if rows[i].CheckLost {
			lost++
		}
		if rows[i].Counted {
			counted++
		}
		if rec.Status == idempotency.StatusInProgress {
			reservations++
		}
	}
	read := len(rows)
	if len(rows) > *limit {
		rows = rows[:*limit]
	}
	err = writeListing(t, rows, *asJSON, "RECORD\tSTATUS\tROUTE\tAGE\tEXPIRES\tCHECK\tCOUNTED", func(s recordSummary) string {
		check, count := "armed", "no"
		if s.CheckLost {
			check = "lost"
		}
		if s.Counted {
			count = "yes"
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", s.Record, s.Status, s.Route, s.For, s.ExpiresAt.Format(time.RFC3339), check, count)
	})
	if err != nil {
		return err
	}
	// With -json too: stdout stays JSON, the cut and the counts go to
	// stderr.
	if read > len(rows) {
		fmt.Fprintf(t.errOut, "%d read, %d listed (raise -limit)\n", read, len(rows))
	}
	fmt.Fprintf(t.errOut, "%d UNKNOWN record(s)\n", read-reservations)
	if reservations > 0 {
		fmt.Fprintf(t.errOut, "%d External reservation(s) (IN_PROGRESS) whose lease ran out, no check handing them to the reconciler or a TTL attribute\n", reservations)
	}
	if lost > 0 {
		fmt.Fprintf(t.errOut, "%d past their expiry by more than %s: their check was lost (see the check and sweeper dead-letter queues); `oncectl reannounce RECORD` re-arms one, `oncectl reannounce -lost` all\n", lost, lostCheckAfter)
	}
	if counted > 0 {
		fmt.Fprintf(t.errOut, "%d counted by the auditor (COUNTED yes): AbandonedRecordsAlarm stays up while one is left\n", counted)
	}
	if unreadable > 0 {
		fmt.Fprintf(t.errOut, "%d unreadable item(s) skipped (named above), counted by the auditor too\n", unreadable)
	}
	return nil
}

// unknownRecord is a record as listUnknown reads it: UNKNOWN, or an
// External reservation whose lease ran out (abandoned.FromItem).
type unknownRecord = abandoned.Record

// listUnknown reads, of tenant unless it is empty, the UNKNOWN records, and
// the External reservations (IN_PROGRESS) whose lease ran out at now and
// whose check is lost (checkLost) or whose item still carries the TTL
// attribute: a Scan of the idempotency table with a filter, every page of
// it (up to maxScanPages), oldest first by recordAge. Neither kind of
// reservation will be handed to the reconciler by its check (lost) or
// before DynamoDB's TTL may delete it (a legacy item's check may be lost
// too, and its TTL frees its key until the sweeper restores it).
//
// An item the filter reads that does not decode as a record (the auditor's
// kind unreadable) is skipped, not a reason to stop: one line on stderr
// names it (its ID) and how to inspect it, and the count of them is
// returned.
func (t *Tool) listUnknown(ctx context.Context, tenant string, now time.Time) ([]unknownRecord, int, error) {
	filter, names, values := abandoned.Filter(tenant, now)
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(t.cfg.Table("IdempotencyTable")),
		FilterExpression:          aws.String(filter),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
	var recs []unknownRecord
	unreadable := 0
	err := t.scanAll(ctx, in, "the records listed are the oldest of those read, not of the whole table", func(item map[string]types.AttributeValue) error {
		rec, listed, err := abandoned.FromItem(item, now)
		if err != nil {
			unreadable++
			id := abandoned.ItemID(item)
			fmt.Fprintf(t.errOut, "skipped unreadable item %s (%v): inspect it with %s\n", id, err, t.getItemCommand(id))
			return nil
		}
		if listed { // a reservation whose check is still due to hand it to the reconciler is not
			recs = append(recs, rec)
		}
		return nil
	})
	if err != nil {
		return nil, unreadable, err
	}
	sortByAge(recs)
	return recs, unreadable, nil
}

// checkLost reports whether rec, UNKNOWN or an External reservation, is
// past its expiry by more than lostCheckAfter at now (abandoned.CheckLost).
func checkLost(rec idempotency.Record, now time.Time) bool { return abandoned.CheckLost(rec, now) }

// recordSummary is a line of the unknown listing.
type recordSummary struct {
	Record string `json:"record"`
	Tenant string `json:"tenant"`
	// Status is UNKNOWN, or IN_PROGRESS for an External reservation whose
	// lease ran out.
	Status string `json:"status"`
	Route  string `json:"route"`
	// Since is what the record's age is from (recordAge): its created_at,
	// or its updated_at when it has no created_at; SinceFrom names which.
	// It is the age the auditor counts, not when the record went UNKNOWN
	// (WentUnknownAt).
	Since     time.Time `json:"unknown_since"`
	SinceFrom string    `json:"unknown_since_from,omitempty"`
	For       string    `json:"unknown_for"`
	// WentUnknownAt is Record.UnknownSince, when the record first went
	// UNKNOWN (what the reconciler's settle wait is measured from, and what
	// show prints as unknown_since); absent on an External reservation and
	// on a record that went UNKNOWN before the attribute existed.
	WentUnknownAt *time.Time `json:"went_unknown_at,omitempty"`
	CreatedAt     *time.Time `json:"created_at,omitempty"`
	UpdatedAt     *time.Time `json:"updated_at,omitempty"`
	ExpiresAt     time.Time  `json:"expires_at"`
	// CheckLost: the record is past its expiry by more than
	// lostCheckAfter, so its check never redrove it.
	CheckLost bool `json:"check_lost"`
	// Counted: the auditor function counts it (abandoned.Record.Stuck),
	// and AbandonedRecordsAlarm stays up while it is left.
	Counted bool `json:"counted"`
}

func summary(rec unknownRecord, now time.Time) recordSummary {
	since, from := recordAge(rec.Record)
	s := recordSummary{
		Record: rec.Key.ID(), Tenant: rec.Key.Tenant, Status: string(rec.Status), Route: rec.Route, Since: since.UTC(), SinceFrom: from,
		WentUnknownAt: timeOrNil(rec.UnknownSince), CreatedAt: timeOrNil(rec.CreatedAt), UpdatedAt: timeOrNil(rec.UpdatedAt),
		ExpiresAt: rec.ExpiresAt.UTC(), CheckLost: checkLost(rec.Record, now), Counted: rec.Stuck(now),
	}
	if !since.IsZero() {
		s.For = now.Sub(since).Round(time.Second).String()
	}
	return s
}

// sortByAge orders recs oldest first by recordAge; a record with neither
// timestamp first.
func sortByAge(recs []unknownRecord) {
	slices.SortStableFunc(recs, func(a, b unknownRecord) int {
		sa, _ := recordAge(a.Record)
		sb, _ := recordAge(b.Record)
		return sa.Compare(sb)
	})
}

// keyArg reads the record a command is about: its ID (tenant#key-hash) as
// the one argument, or -tenant and -key: the Idempotency-Key header's value
// as the client sent it, a bare token or a structured-field string
// ("abc"), parsed as the API parses the header (idempotency.ParseKey) and
// hashed here, never printed. A -key or -tenant the API would refuse
// (idempotency.ValidateTenant) is a usage error: no record can have it.
func keyArg(fs *flag.FlagSet, tenant, raw string) (idempotency.Key, error) {
	switch {
	case fs.NArg() == 1 && tenant == "" && raw == "":
		k, err := idempotency.ParseID(fs.Arg(0))
		if err != nil || !keyHash.MatchString(k.Hash) {
			return idempotency.Key{}, usageError{fs, fmt.Sprintf("%q is not a record ID (tenant#key-hash, as `oncectl unknown` lists them)", fs.Arg(0))}
		}
		return k, nil
	case fs.NArg() == 0 && tenant != "" && raw != "":
		if err := idempotency.ValidateTenant(tenant); err != nil {
			reason := err.Error()
			if te := (*idempotency.TenantError)(nil); errors.As(err, &te) {
				reason = te.Reason
			}
			return idempotency.Key{}, usageError{fs, "-tenant: not a tenant the API accepts: " + reason}
		}
		key, err := idempotency.ParseKey([]string{raw})
		if err != nil {
			reason := err.Error()
			if ke := (*idempotency.KeyError)(nil); errors.As(err, &ke) {
				reason = ke.Reason
			}
			return idempotency.Key{}, usageError{fs, `-key: not an Idempotency-Key the API accepts (a token, or a structured-field string as "abc"): ` + reason}
		}
		return idempotency.NewKey(tenant, key), nil
	}
	return idempotency.Key{}, usageError{fs, "give a record ID, or -tenant and -key"}
}

// recordArg adds -tenant and -key to fs and returns what, given the
// command's arguments, parses them and reads the record they name (keyArg).
func (t *Tool) recordArg(fs *flag.FlagSet) func(ctx context.Context, args []string) (idempotency.Key, idempotency.Record, error) {
	tenant := fs.String("tenant", "", "the record's tenant, with -key")
	raw := fs.String("key", "", "the Idempotency-Key header's value as sent (abc or \"abc\"), with -tenant (hashed, never printed)")
	return func(ctx context.Context, args []string) (idempotency.Key, idempotency.Record, error) {
		if err := t.parse(fs, args, -1); err != nil {
			return idempotency.Key{}, idempotency.Record{}, err
		}
		key, err := keyArg(fs, *tenant, *raw)
		if err != nil {
			return key, idempotency.Record{}, err
		}
		rec, err := t.store.Get(ctx, key)
		switch {
		case errors.Is(err, idempotency.ErrNotFound):
			return key, rec, fmt.Errorf("no record %s", key.ID())
		case err != nil:
			return key, rec, fmt.Errorf("%s: %w", key.ID(), err)
		}
		return key, rec, nil
	}
}

// recordView is a record as show prints it.
type recordView struct {
	Record      string    `json:"record"`
	Tenant      string    `json:"tenant"`
	KeyHash     string    `json:"key_hash"`
	Status      string    `json:"status"`
	Route       string    `json:"route"`
	External    bool      `json:"external"`
	ForwardKey  string    `json:"forward_key,omitempty"`
	LeaseToken  string    `json:"lease_token,omitempty"`
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	Expired     bool      `json:"expired"`
	// UnknownSince is an UNKNOWN record's Record.UnknownSince, from which
	// the reconciler's settle wait runs (none on a record written UNKNOWN
	// before stores kept it).
	UnknownSince *time.Time      `json:"unknown_since,omitempty"`
	Request      json.RawMessage `json:"request,omitempty"`
	Response     *responseView   `json:"response,omitempty"`
}

type responseView struct {
	Status    int               `json:"status"`
	Header    map[string]string `json:"header,omitempty"`
	BodyBytes int               `json:"body_bytes"`
	Body      *string           `json:"body,omitempty"`
}

// view is rec as show prints it at now, without bodies.
func view(rec idempotency.Record, now time.Time) recordView {
	v := recordView{
		Record: rec.Key.ID(), Tenant: rec.Key.Tenant, KeyHash: rec.Key.Hash, Status: string(rec.Status), Route: rec.Route,
		External: rec.External, LeaseToken: rec.LeaseToken, Fingerprint: rec.Fingerprint,
		CreatedAt: rec.CreatedAt.UTC(), UpdatedAt: rec.UpdatedAt.UTC(), ExpiresAt: rec.ExpiresAt.UTC(), Expired: rec.Expired(now),
	}
	if rec.External {
		v.ForwardKey = rec.ForwardKey()
	}
	if !rec.UnknownSince.IsZero() {
		since := rec.UnknownSince.UTC()
		v.UnknownSince = &since
	}
	return v
}

// show prints one record as JSON.
func (t *Tool) show(ctx context.Context, args []string) error {
	fs := t.flags("show", "[-bodies] (RECORD | -tenant T -key KEY)", "Show one record (the raw key is never printed: its hash is).")
	read := t.recordArg(fs)
	bodies := fs.Bool("bodies", false, "include the request and response bodies")
	_, rec, err := read(ctx, args)
	if err != nil {
		return err
	}
	v := view(rec, t.now())
	if *bodies && len(rec.Request) > 0 {
		v.Request = json.RawMessage(rec.Request) // canonical JSON
	}
	if r := rec.Response; r != nil {
		v.Response = &responseView{Status: r.Status, Header: r.Header, BodyBytes: len(r.Body)}
		if *bodies {
			b := string(r.Body)
			v.Response.Body = &b
		}
	}
	enc := json.NewEncoder(t.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// reannounce hands a record to the reconciler again (rearm), or with -lost
// every UNKNOWN record no check is armed for (reannounceLost).
func (t *Tool) reannounce(ctx context.Context, args []string) error {
	fs := t.flags("reannounce", "(RECORD | -tenant T -key KEY) | -lost [-tenant T] [-limit N]",
		"Hand a record to the reconciler again: an UNKNOWN record, or an External reservation whose lease ran out; either is then UNKNOWN, its expiry at least ONCE_RETENTION from now, kept until it is reconciled or forgotten.\n"+
			"-lost does so for every record `oncectl unknown` lists (of -tenant) that no recovery check will hand to the reconciler, oldest first:\n"+
			"the UNKNOWN records and External reservations it marks lost, and those written before the upgrade that took their TTL\n"+
			"attribute (expires_at) away (UNKNOWN, or External reservations whose lease ran out). A record changed meanwhile is reported and skipped.\n"+
			"-lost ends its summary on stderr with a line rearmed=N changed=N unreadable=N failed=N left=N (left: over -limit, not tried).\n"+
			"Exit status: 0 when every record it found was re-armed (unreadable items, which it cannot re-arm, are skipped, named\n"+
			"and counted, not a failure); 1 when one changed meanwhile or failed (run it again) or left > 0 (raise -limit and run\n"+
			"it again); 2 on a usage error.")
	lost := fs.Bool("lost", false, "every UNKNOWN record or External reservation whose check is lost or that still has a TTL attribute (no RECORD)")
	limit := fs.Int("limit", 100, "with -lost: re-announce at most this many")
	read := t.recordArg(fs)
	if err := t.parse(fs, args, -1); err != nil {
		return err
	}
	if !*lost {
		key, rec, err := read(ctx, args) // parses args again, as it needs
		if err != nil {
			return err
		}
		expires, err := t.rearm(ctx, rec, t.now())
		if err != nil {
			return err
		}
		fmt.Fprintf(t.out, "%s re-announced to the reconciler (UNKNOWN under a new lease token, expires %s)\n", key.ID(), expires.UTC().Format(time.RFC3339))
		return nil
	}
	tenant, raw := fs.Lookup("tenant").Value.String(), fs.Lookup("key").Value.String()
	switch {
	case fs.NArg() > 0 || raw != "":
		return usageError{fs, "-lost takes no record: give neither a RECORD nor -key"}
	case *limit < 1:
		return usageError{fs, "-limit must be positive"}
	}
	return t.reannounceLost(ctx, tenant, *limit)
}

// reannounceLost re-arms (rearm) the records of tenant (all, if it is
// empty) that listUnknown reads and no check will redrive or hand to the
// reconciler: UNKNOWN records and External reservations past their expiry
// by more than lostCheckAfter, or still carrying the TTL attribute (the
// reservations listUnknown reads have run out of lease). At most limit,
// oldest first; one line each, by record ID. Each is read again,
// consistently, before its write (reread): one changed since the listing,
// or no longer abandoned (errChanged), or whose write fails is reported
// and the rest still done; the error then counts them. An unreadable item
// (listUnknown) is skipped, named on stderr and counted in the summary,
// not an error: nothing re-arms it, and the count says it is left. The
// abandoned records past the limit are not tried, counted as left: an
// error, to raise the limit and run it again. The summary's last line is
// rearmed=N changed=N unreadable=N failed=N left=N.
func (t *Tool) reannounceLost(ctx context.Context, tenant string, limit int) error {
	now := t.now()
	recs, unreadable, err := t.listUnknown(ctx, tenant, now)
	if err != nil {
		return err
	}
	done, changed, failed, left := 0, 0, 0, 0
	for _, rec := range recs {
		if !rec.Abandoned(now) {
			continue
		}
		if done+changed+failed == limit {
			left++ // not tried: counted, so that the command fails
			continue
		}
		why := "check lost"
		switch {
		case rec.Status == idempotency.StatusInProgress && rec.LegacyTTL:
			why = "External reservation, lease run out, TTL attribute"
		case rec.Status == idempotency.StatusInProgress:
			why = "External reservation, check lost"
		case rec.LegacyTTL:
			why = "TTL attribute, no check armed"
		}
		// The listing's Scan is eventually consistent, and rearm's write
		// is fenced on the lease token only: a lease renewed, or a phase
		// committed, under the same token since must not be re-armed.
		fresh, err := t.reread(ctx, rec, now)
		var expires time.Time
		if err == nil {
			expires, err = t.rearm(ctx, fresh, now)
		}
		if err != nil {
			if errors.Is(err, errChanged) {
				changed++
			} else {
				failed++
			}
			fmt.Fprintln(t.out, err) // it names the record
			continue
		}
		done++
		fmt.Fprintf(t.out, "%s re-announced (%s; UNKNOWN under a new lease token, expires %s)\n", rec.Key.ID(), why, expires.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(t.errOut, "%d re-announced, %d changed meanwhile, %d failed, %d unreadable skipped, of %d UNKNOWN record(s) or abandoned External reservation(s) read\n",
		done, changed, failed, unreadable, len(recs))
	if unreadable > 0 {
		fmt.Fprintf(t.errOut, "%d unreadable item(s) skipped, counted by the auditor: inspect each with aws dynamodb get-item (above), and delete it with aws dynamodb delete-item if it must go\n", unreadable)
	}
	fmt.Fprintf(t.errOut, "rearmed=%d changed=%d unreadable=%d failed=%d left=%d\n", done, changed, unreadable, failed, left)
	var errs []error
	if changed+failed > 0 {
		errs = append(errs, fmt.Errorf("%d record(s) not re-announced (%d changed meanwhile, %d failed): look at them again with `oncectl show`", changed+failed, changed, failed))
	}
	if left > 0 {
		errs = append(errs, fmt.Errorf("%d record(s) left, not tried (over -limit %d): raise -limit and run it again", left, limit))
	}
	return errors.Join(errs...)
}

// errChanged is the error, wrapped, of a record reannounce -lost found
// changed since its listing: skipped, and the command exits 1.
var errChanged = errors.New("changed meanwhile")

// reread reads rec's record again, strongly consistent, and returns it if
// it is still as listUnknown read it (status, kind, lease token, expiry,
// update time: a lease renewed or a phase committed under the same token
// moves the last two) and still abandoned at now; else an error naming it,
// changed meanwhile.
func (t *Tool) reread(ctx context.Context, rec unknownRecord, now time.Time) (idempotency.Record, error) {
	got, err := t.store.Get(ctx, rec.Key)
	if errors.Is(err, idempotency.ErrNotFound) {
		return got, fmt.Errorf("%s %w (no record now)", rec.Key.ID(), errChanged)
	}
	if err != nil {
		return got, fmt.Errorf("%s: %w", rec.Key.ID(), err)
	}
	same := got.Status == rec.Status && got.External == rec.External && got.LeaseToken == rec.LeaseToken &&
		got.ExpiresAt.Equal(rec.ExpiresAt) && got.UpdatedAt.Equal(rec.UpdatedAt)
	if !same || !(unknownRecord{Record: got, LegacyTTL: rec.LegacyTTL}).Abandoned(now) {
		return got, fmt.Errorf("%s %w (now %s, expires %s): look at it again with `oncectl show`",
			rec.Key.ID(), errChanged, got.Status, got.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return got, nil
}

// rearm hands rec, as read, to the reconciler again: a fenced MarkUnknown
// under rec's lease token and a new one, which is the stream MODIFY the
// reconciler is triggered by (and the Scheduler arms a check on), with an
// expiry at least the retention from now and no TTL attribute (the
// store's TTL never deletes an UNKNOWN record, and removes a legacy
// item's). It returns the expiry;
// an error if rec is not UNKNOWN or an External reservation whose lease
// ran out, or if the record changed since rec was read.
func (t *Tool) rearm(ctx context.Context, rec idempotency.Record, now time.Time) (time.Time, error) {
	key := rec.Key
	// The record's expiry is a retention from now, as the checker gives an
	// External reservation whose lease ran out when it hands it to the
	// reconciler. (A new request never reclaims an UNKNOWN record, expired
	// or not, and the store's TTL never deletes one.)
	expires := now.Add(t.cfg.Retention)
	switch {
	case rec.Status == idempotency.StatusUnknown:
		// Extended, never shortened.
		if rec.ExpiresAt.After(expires) {
			expires = rec.ExpiresAt
		}
	case rec.Status == idempotency.StatusInProgress && rec.External && rec.Expired(now):
		// As the checker would have: its check may be in a dead-letter
		// queue.
	case rec.Status == idempotency.StatusInProgress && !rec.Expired(now):
		return time.Time{}, fmt.Errorf("%s is IN_PROGRESS and its lease runs until %s: its request may still be running", key.ID(), rec.ExpiresAt.UTC().Format(time.RFC3339))
	case rec.Status == idempotency.StatusInProgress:
		return time.Time{}, fmt.Errorf("%s is an abandoned reservation of a route that is not External: there is nothing to reconcile, the key is free", key.ID())
	default:
		return time.Time{}, fmt.Errorf("%s is %s: there is nothing to reconcile", key.ID(), rec.Status)
	}
	err := t.store.MarkUnknown(ctx, key, rec.LeaseToken, idempotency.NewToken(), expires, now)
	var conflict *idempotency.ConflictError
	if errors.As(err, &conflict) {
		return time.Time{}, fmt.Errorf("%s %w (%v): look at it again with `oncectl show`", key.ID(), errChanged, err)
	}
	return expires, err
}

// writeJSON writes v as one line.
func (t *Tool) writeJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(t.out, strings.TrimSpace(string(b)))
	return err
}
