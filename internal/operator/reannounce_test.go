package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/operator"
)

// afterScan is a DynamoDB client that runs fn once, just after its first
// Scan of the idempotency table: what another writer does between the
// listing and the writes.
type afterScan struct {
	*dynamodb.Client
	table string
	once  sync.Once
	fn    func()
}

func (a *afterScan) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	out, err := a.Client.Scan(ctx, in, opts...)
	if aws.ToString(in.TableName) == a.table {
		a.once.Do(a.fn)
	}
	return out, err
}

// TestReannounceLost: reannounce -lost re-arms every UNKNOWN record of the
// tenant whose check chain is lost or that still carries the TTL attribute
// (an item from before the upgrade), and every External reservation of the
// tenant past its lease by as much (no TTL deletes it, no check will hand
// it to the reconciler) or whose lease ran out and whose item still
// carries the TTL attribute, and nothing else; a record changed between
// the listing and its write is reported and skipped, the others still
// done, and the exit code says one failed.
func TestReannounceLost(t *testing.T) {
	e := newEnv(t)
	table := e.names.ByLogicalID["IdempotencyTable"]
	now := time.Now()
	const day = 24 * time.Hour
	unknown := func(tenant, raw string, expires time.Duration) idempotency.Record {
		rec := idempotency.Record{
			Key: idempotency.NewKey(tenant, raw), Status: idempotency.StatusUnknown, Route: "POST /v1/charges", Fingerprint: "f00d",
			External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(expires),
			CreatedAt: now.Add(-2 * day), UpdatedAt: now.Add(-2 * day),
		}
		e.put(t, rec)
		return rec
	}
	legacy := unknown("acme", "legacy", time.Hour)
	legacyItem(t, e, legacy.Key, time.Unix(4102444800, 0)) // written before UNKNOWN records lost their TTL
	// reservation is an External reservation (or not) of the tenant whose
	// lease ran out (or runs) at now+expires, with the TTL attribute of
	// a legacy item if legacy.
	reservation := func(raw string, external bool, expires time.Duration, legacy bool) idempotency.Record {
		rec := unknown("acme", raw, expires)
		rec.Status, rec.External = idempotency.StatusInProgress, external
		e.put(t, rec)
		if legacy {
			legacyItem(t, e, rec.Key, rec.ExpiresAt.Add(day))
		}
		return rec
	}
	raced := unknown("acme", "raced", -day)
	raced.CreatedAt = now.Add(-3 * day) // the oldest: the first written, the others after it
	e.put(t, raced)
	racedLease := idempotency.NewToken()
	tests := []struct {
		name string
		rec  idempotency.Record
		// want: re-armed by the command; lease: else the lease token
		// the record must still have.
		want  bool
		lease string
	}{
		{name: "legacy item with expires_at", rec: legacy, want: true},
		{name: "check lost", rec: unknown("acme", "lost", -day), want: true},
		{name: "fresh, armed", rec: unknown("acme", "fresh", day)},
		{name: "completed", rec: e.record(t, "acme", "done", idempotency.StatusCompleted, time.Hour)},
		{name: "other tenant", rec: unknown("globex", "lost", -day)},
		{name: "changed meanwhile", rec: raced, lease: racedLease},
		{name: "External reservation, check lost", rec: reservation("reserved-lost", true, -day, false), want: true},
		{name: "External reservation, lease just run out", rec: reservation("reserved-due", true, -time.Minute, false)},
		{name: "External reservation, within its lease", rec: reservation("reserved-running", true, time.Minute, false)},
		{name: "legacy External reservation, lease run out", rec: reservation("reserved-legacy", true, -time.Minute, true), want: true},
		{name: "legacy External reservation, within its lease", rec: reservation("reserved-legacy-running", true, time.Minute, true)},
		{name: "reservation not External, long run out", rec: reservation("leased", false, -day, true)},
	}
	cfg, err := config.FromEnv(func(k string) string { return e.vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	db := &afterScan{Client: e.db, table: table, fn: func() { // the Checker redrives it meanwhile
		if err := e.store.MarkUnknown(t.Context(), raced.Key, raced.LeaseToken, racedLease, now.Add(day), now); err != nil {
			t.Error(err)
		}
	}}
	var out, errOut strings.Builder
	code := operator.New(cfg, db, e.sqs, &out, &errOut).Run(t.Context(), []string{"reannounce", "-lost", "-tenant", "acme"})
	if code != 1 {
		t.Errorf("reannounce -lost = exit %d, want 1 (one record changed meanwhile)", code)
	}
	errLines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
	if n := len(errLines); !strings.Contains(out.String(), raced.Key.ID()+" changed meanwhile") || !strings.Contains(errOut.String(), "4 re-announced, 1 changed meanwhile, 0 failed") ||
		n < 2 || errLines[n-2] != "rearmed=4 changed=1 unreadable=0 failed=0 left=0" || !strings.HasPrefix(errLines[n-1], "oncectl reannounce: ") {
		t.Errorf("reannounce -lost = %q %q, want the raced record reported, 4 re-announced, 1 changed meanwhile, and the marker the last line before the error", out.String(), errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), "legacy") {
		t.Errorf("reannounce -lost printed a raw key: %q %q", out.String(), errOut.String())
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.store.Get(t.Context(), tt.rec.Key)
			if err != nil {
				t.Fatal(err)
			}
			if said := strings.Contains(out.String(), tt.rec.Key.ID()+" re-announced"); said != tt.want {
				t.Errorf("output says %s re-announced: %v, want %v", tt.rec.Key.Short(), said, tt.want)
			}
			if !tt.want {
				lease := tt.rec.LeaseToken
				if tt.lease != "" {
					lease = tt.lease
				}
				if got.Status != tt.rec.Status || got.LeaseToken != lease {
					t.Errorf("after reannounce -lost: %s under %q, want untouched: %s under %q", got.Status, got.LeaseToken, tt.rec.Status, lease)
				}
				return
			}
			if got.Status != idempotency.StatusUnknown || got.LeaseToken == tt.rec.LeaseToken || got.ExpiresAt.Before(now.Add(config.DefaultRetention)) {
				t.Errorf("after reannounce -lost: %s under %q, expires %v; want UNKNOWN under a new lease token, expiring a retention from now", got.Status, got.LeaseToken, got.ExpiresAt)
			}
			item, err := e.db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: itemKey(tt.rec.Key), ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			if ttl, ok := item.Item[dynamo.AttrExpiresAt]; ok {
				t.Errorf("TTL attribute %s = %v after reannounce -lost, want none", dynamo.AttrExpiresAt, ttl)
			}
		})
	}
}

// TestReannounceLostLimit: reannounce -lost with more abandoned records
// than -limit re-arms the oldest -limit, counts those it did not try
// (left=N in its marker) and exits 1, saying to raise -limit and run it
// again; the marker is the last line before that error.
func TestReannounceLostLimit(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	const day = 24 * time.Hour
	recs := make([]idempotency.Record, 3)
	for i := range recs {
		recs[i] = idempotency.Record{
			Key: idempotency.NewKey("acme", fmt.Sprintf("lost-%d", i)), Status: idempotency.StatusUnknown, Route: "POST /v1/charges", Fingerprint: "f00d",
			External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(-day),
			CreatedAt: now.Add(-time.Duration(3-i) * day), UpdatedAt: now.Add(-2 * day), // lost-0 the oldest
		}
		e.put(t, recs[i])
	}
	code, out, errOut := e.run(t, "reannounce", "-lost", "-limit", "2")
	if code != 1 {
		t.Errorf("reannounce -lost -limit 2 = exit %d, want 1 (one record left)", code)
	}
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if n := len(lines); n < 2 || lines[n-2] != "rearmed=2 changed=0 unreadable=0 failed=0 left=1" ||
		!strings.HasPrefix(lines[n-1], "oncectl reannounce: ") || !strings.Contains(lines[n-1], "raise -limit and run it again") {
		t.Errorf("reannounce -lost -limit 2 stderr = %q, want the marker rearmed=2 changed=0 unreadable=0 failed=0 left=1, then the error saying raise -limit and run it again", errOut)
	}
	for i, rec := range recs {
		if said, want := strings.Contains(out, rec.Key.ID()+" re-announced"), i < 2; said != want {
			t.Errorf("output says %s re-announced: %v, want %v (oldest first)", rec.Key.Short(), said, want)
		}
	}
	// Run again with room: the one left is re-armed, nothing is left.
	code, _, errOut = e.run(t, "reannounce", "-lost", "-limit", "2")
	if lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n"); code != 0 || lines[len(lines)-1] != "rearmed=1 changed=0 unreadable=0 failed=0 left=0" {
		t.Errorf("reannounce -lost -limit 2 again = exit %d %q, want 0 and the marker rearmed=1 changed=0 unreadable=0 failed=0 left=0 last", code, errOut)
	}
}

// TestReannounceLostUsage: -lost takes no record.
func TestReannounceLostUsage(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{
		{"reannounce", "-lost", "acme#" + strings.Repeat("a", 64)},
		{"reannounce", "-lost", "-tenant", "acme", "-key", "k"},
		{"reannounce", "-lost", "-limit", "0"},
	} {
		if code, _, errOut := e.run(t, args...); code != 2 {
			t.Errorf("%v = exit %d %q, want 2", args, code, errOut)
		}
	}
}

// legacyItem gives k's item the TTL attribute at ttl, as an UNKNOWN record
// or an External reservation written before they lost it carries.
func legacyItem(t *testing.T, e *env, k idempotency.Key, ttl time.Time) {
	t.Helper()
	if _, err := e.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName: aws.String(e.names.ByLogicalID["IdempotencyTable"]), Key: itemKey(k),
		UpdateExpression:          aws.String("SET #ttl = :ttl"),
		ExpressionAttributeNames:  map[string]string{"#ttl": dynamo.AttrExpiresAt},
		ExpressionAttributeValues: map[string]dynamodbtypes.AttributeValue{":ttl": &dynamodbtypes.AttributeValueMemberN{Value: strconv.FormatInt(ttl.Unix(), 10)}},
	}); err != nil {
		t.Fatal(err)
	}
}

func itemKey(k idempotency.Key) map[string]dynamodbtypes.AttributeValue {
	return map[string]dynamodbtypes.AttributeValue{dynamo.AttrPK: &dynamodbtypes.AttributeValueMemberS{Value: k.ID()}}
}

// TestUnknownListsLostReservations: unknown lists, beside the UNKNOWN
// records, the External reservations that no check will hand to the
// reconciler and no TTL will delete: past their lease by more than
// recovery.MaxDelay and the margin (check lost), or, written before
// External reservations lost their TTL attribute, whose lease ran out; not
// one whose lease just ran out (its check is due), nor one within its lease,
// nor a reservation that is not External (its key is free).
func TestUnknownListsLostReservations(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	const day = 24 * time.Hour
	tests := []struct {
		name     string
		status   idempotency.Status
		external bool
		expires  time.Duration // from now
		legacy   bool          // the item carries the TTL attribute
		listed   bool
		lost     bool
		counted  bool // by the auditor (abandoned.Record.Stuck)
	}{
		{name: "unknown", status: idempotency.StatusUnknown, external: true, expires: day, listed: true},
		{name: "unknown, check lost", status: idempotency.StatusUnknown, external: true, expires: -day, listed: true, lost: true, counted: true},
		{name: "legacy unknown", status: idempotency.StatusUnknown, external: true, expires: day, legacy: true, listed: true, counted: true},
		{name: "external, check lost", status: idempotency.StatusInProgress, external: true, expires: -day, listed: true, lost: true, counted: true},
		{name: "external, lease just run out", status: idempotency.StatusInProgress, external: true, expires: -time.Minute},
		{name: "external, within its lease", status: idempotency.StatusInProgress, external: true, expires: time.Minute},
		{name: "legacy external, lease run out", status: idempotency.StatusInProgress, external: true, expires: -time.Minute, legacy: true, listed: true},
		{name: "legacy external, check lost", status: idempotency.StatusInProgress, external: true, expires: -day, legacy: true, listed: true, lost: true, counted: true},
		{name: "legacy external, within its lease", status: idempotency.StatusInProgress, external: true, expires: time.Minute, legacy: true},
		{name: "not external, long run out", status: idempotency.StatusInProgress, expires: -day, legacy: true},
	}
	type line struct {
		Record    string `json:"record"`
		Status    string `json:"status"`
		CheckLost bool   `json:"check_lost"`
		Counted   *bool  `json:"counted"`
	}
	recs := make([]idempotency.Record, len(tests))
	for i, tt := range tests {
		recs[i] = idempotency.Record{
			Key: idempotency.NewKey("acme", tt.name), Status: tt.status, Route: "POST /v1/charges", Fingerprint: "f00d",
			External: tt.external, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(tt.expires),
			CreatedAt: now.Add(-2 * day), UpdatedAt: now.Add(-2 * day),
		}
		e.put(t, recs[i])
		if tt.legacy {
			legacyItem(t, e, recs[i].Key, recs[i].ExpiresAt.Add(day))
		}
	}
	code, out, errOut := e.run(t, "unknown", "-json")
	if code != 0 {
		t.Fatalf("unknown -json = exit %d: %s", code, errOut)
	}
	got := map[string]line{}
	for l := range strings.Lines(out) {
		var s line
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		got[s.Record] = s
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, listed := got[recs[i].Key.ID()]
			if listed != tt.listed {
				t.Fatalf("listed = %v, want %v", listed, tt.listed)
			}
			if listed && (g.Status != string(tt.status) || g.CheckLost != tt.lost) {
				t.Errorf("listed as %s, check_lost %v; want %s, %v", g.Status, g.CheckLost, tt.status, tt.lost)
			}
			if listed && (g.Counted == nil || *g.Counted != tt.counted) {
				t.Errorf("listed with counted %v, want %v (the auditor's abandoned.Record.Stuck)", g.Counted, tt.counted)
			}
		})
	}
	code, out, errOut = e.run(t, "unknown")
	header, rows, _ := strings.Cut(out, "\n")
	if !strings.Contains(header, "AGE") || strings.Contains(header, "UNKNOWN FOR") || !strings.Contains(header, "COUNTED") {
		t.Errorf("table header = %q, want AGE (the rows are not all UNKNOWN), not UNKNOWN FOR, and COUNTED", header)
	}
	if code != 0 || !strings.Contains(out, "IN_PROGRESS") || !strings.Contains(errOut, "3 External reservation(s)") || !strings.Contains(errOut, "3 past their expiry") ||
		!strings.Contains(errOut, "4 counted by the auditor") {
		t.Errorf("table = exit %d %q %q, want the reservations listed IN_PROGRESS, counted, the 3 lost checks and the 4 the auditor counts", code, out, errOut)
	}
	for i, tt := range tests {
		if !tt.listed {
			continue
		}
		for row := range strings.Lines(rows) {
			if !strings.HasPrefix(row, recs[i].Key.ID()) {
				continue
			}
			if fields := strings.Fields(row); fields[len(fields)-1] != map[bool]string{true: "yes", false: "no"}[tt.counted] {
				t.Errorf("%s: row %q, want COUNTED (last) %v", tt.name, row, tt.counted)
			}
		}
	}
}

// TestReannounceLostRereads: reannounce -lost reads each record again,
// consistently, before it re-arms it, and skips, as changed meanwhile, one
// that no longer qualifies though its lease token is the same (its Scan
// row may be stale, and the write is fenced on the token only): a lease
// renewed or a phase committed between the listing and the write leaves
// the record as it is, and so does a write that moves its updated_at
// alone (status, External, lease token and expiry as listed).
func TestReannounceLostRereads(t *testing.T) {
	e := newEnv(t)
	table := e.names.ByLogicalID["IdempotencyTable"]
	now := time.Now()
	const day = 24 * time.Hour
	tests := []struct {
		name   string
		status idempotency.Status
		// expires is the record's expiry from now as listed; legacy: its
		// item carries the TTL attribute.
		expires time.Duration
		legacy  bool
		// meanwhile, unless zero, is the expiry from now an Advance under
		// the same lease token gives it between the Scan and the write.
		meanwhile time.Duration
		// touched: between the Scan and the write, only the record's
		// updated_at moves.
		touched bool
		want    bool // re-armed
	}{
		{name: "External reservation, check lost", status: idempotency.StatusInProgress, expires: -day, want: true},
		{name: "External reservation, check lost, lease renewed", status: idempotency.StatusInProgress, expires: -day, meanwhile: 5 * time.Minute},
		{name: "legacy External reservation, lease run out, renewed", status: idempotency.StatusInProgress, expires: -time.Second, legacy: true, meanwhile: 5 * time.Minute},
		{name: "UNKNOWN, check lost, resumed", status: idempotency.StatusUnknown, expires: -day, meanwhile: 5 * time.Minute},
		{name: "legacy UNKNOWN, resumed", status: idempotency.StatusUnknown, expires: time.Hour, legacy: true, meanwhile: 2 * time.Hour},
		{name: "legacy UNKNOWN", status: idempotency.StatusUnknown, expires: time.Hour, legacy: true, want: true},
		{name: "External reservation, check lost, touched", status: idempotency.StatusInProgress, expires: -day, touched: true},
		{name: "UNKNOWN, check lost, touched", status: idempotency.StatusUnknown, expires: -day, touched: true},
	}
	recs := make([]idempotency.Record, len(tests))
	for i, tt := range tests {
		recs[i] = idempotency.Record{
			Key: idempotency.NewKey("acme", tt.name), Status: tt.status, Route: "POST /v1/charges", Fingerprint: "f00d",
			External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(tt.expires),
			CreatedAt: now.Add(-2 * day), UpdatedAt: now.Add(-2 * day),
		}
		e.put(t, recs[i])
		if tt.legacy {
			legacyItem(t, e, recs[i].Key, recs[i].ExpiresAt.Add(day))
		}
	}
	cfg, err := config.FromEnv(func(k string) string { return e.vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	// touchedAt is the updated_at the touched records are given.
	touchedAt := now.Add(-day).Truncate(time.Millisecond)
	db := &afterScan{Client: e.db, table: table, fn: func() {
		for i, tt := range tests {
			if tt.touched {
				if _, err := e.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
					TableName:                 aws.String(table),
					Key:                       map[string]dynamodbtypes.AttributeValue{dynamo.AttrPK: &dynamodbtypes.AttributeValueMemberS{Value: recs[i].Key.ID()}},
					UpdateExpression:          aws.String("SET #u = :u"),
					ExpressionAttributeNames:  map[string]string{"#u": dynamo.AttrUpdatedAt},
					ExpressionAttributeValues: map[string]dynamodbtypes.AttributeValue{":u": &dynamodbtypes.AttributeValueMemberN{Value: strconv.FormatInt(touchedAt.UnixMilli(), 10)}},
				}); err != nil {
					t.Errorf("%s: touch: %v", tt.name, err)
				}
			}
			if tt.meanwhile == 0 {
				continue
			}
			p := idempotency.Progress{
				Point: "charged", Data: map[string]string{"charge": "ch_1"}, Added: map[string]string{"charge": "ch_1"},
				LeaseToken: recs[i].LeaseToken, ExpiresAt: time.Now().Add(tt.meanwhile), UpdatedAt: time.Now(),
				Status: tt.status, External: true,
			}
			if err := e.store.Advance(t.Context(), recs[i].Key, recs[i].LeaseToken, p, nil); err != nil {
				t.Errorf("%s: Advance: %v", tt.name, err)
			}
		}
	}}
	var out, errOut strings.Builder
	code := operator.New(cfg, db, e.sqs, &out, &errOut).Run(t.Context(), []string{"reannounce", "-lost", "-tenant", "acme"})
	if code != 1 {
		t.Errorf("reannounce -lost = exit %d, want 1 (records changed meanwhile)", code)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := recs[i].Key.ID()
			if said := strings.Contains(out.String(), id+" re-announced"); said != tt.want {
				t.Errorf("output says %s re-announced: %v, want %v", recs[i].Key.Short(), said, tt.want)
			}
			if changed := strings.Contains(out.String(), id+" changed meanwhile"); changed == tt.want {
				t.Errorf("output says %s changed meanwhile: %v, want %v", recs[i].Key.Short(), changed, !tt.want)
			}
			got, err := e.store.Get(t.Context(), recs[i].Key)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want {
				if got.Status != idempotency.StatusUnknown || got.LeaseToken == recs[i].LeaseToken {
					t.Errorf("after reannounce -lost: %s under %q, want UNKNOWN under a new lease token", got.Status, got.LeaseToken)
				}
				return
			}
			if tt.touched {
				if got.Status != tt.status || got.LeaseToken != recs[i].LeaseToken || !got.UpdatedAt.Equal(touchedAt) ||
					got.ExpiresAt.UnixMilli() != recs[i].ExpiresAt.UnixMilli() {
					t.Errorf("after reannounce -lost: %s under %q, expiring %s, updated %s; want it as touched: %s under %q, expiring %s, updated %s",
						got.Status, got.LeaseToken, got.ExpiresAt, got.UpdatedAt, tt.status, recs[i].LeaseToken, recs[i].ExpiresAt, touchedAt)
				}
				return
			}
			if got.Status != tt.status || got.LeaseToken != recs[i].LeaseToken || got.Point != "charged" {
				t.Errorf("after reannounce -lost: %s under %q at %q, want it as the Advance left it: %s under %q at %q", got.Status, got.LeaseToken, got.Point, tt.status, recs[i].LeaseToken, "charged")
			}
		})
	}
}

// TestUnreadableItem: an item the Scan filter reads (UNKNOWN) that does
// not decode as a record (here, no expires_ms) is no reason to stop:
// unknown warns on stderr with its ID and how to inspect it, and lists the
// others; reannounce -lost re-arms the others, counts it skipped in its
// summary (unreadable=1) and exits 0: nothing it could do failed, and the
// count says what is left. forget cannot read it either (it says so): the
// runbook deletes it with aws dynamodb delete-item.
func TestUnreadableItem(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	lost := idempotency.Record{
		Key: idempotency.NewKey("acme", "lost"), Status: idempotency.StatusUnknown, Route: "POST /v1/charges", Fingerprint: "f00d",
		External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(-24 * time.Hour),
		CreatedAt: now.Add(-48 * time.Hour), UpdatedAt: now.Add(-48 * time.Hour),
	}
	e.put(t, lost)
	bad := lost
	bad.Key = idempotency.NewKey("acme", "unreadable")
	item := dynamo.ItemFromRecord(bad)
	delete(item, dynamo.AttrExpiresAtMS)
	if _, err := e.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(e.names.ByLogicalID["IdempotencyTable"]), Item: item}); err != nil {
		t.Fatal(err)
	}
	id := bad.Key.ID()

	code, out, errOut := e.run(t, "unknown", "-json")
	if code != 0 || !strings.Contains(out, lost.Key.ID()) || strings.Contains(out, id) {
		t.Errorf("unknown = %d, %q; want 0, listing %s and not %s (stderr %q)", code, out, lost.Key.ID(), id, errOut)
	}
	getItem := fmt.Sprintf(`aws dynamodb get-item --table-name %s --key '{"pk":{"S":"%s"}}'`, e.names.ByLogicalID["IdempotencyTable"], id)
	if !strings.Contains(errOut, id) || !strings.Contains(errOut, "unreadable") || !strings.Contains(errOut, getItem) {
		t.Errorf("unknown stderr = %q, want a warning naming %s, unreadable, and aws dynamodb get-item", errOut, id)
	}

	code, out, errOut = e.run(t, "reannounce", "-lost")
	if code != 0 || !strings.Contains(out, lost.Key.ID()+" re-announced") || !strings.Contains(errOut, id) ||
		!strings.Contains(errOut, "1 re-announced, 0 changed meanwhile, 0 failed, 1 unreadable skipped") ||
		!strings.Contains(errOut, "\nrearmed=1 changed=0 unreadable=1 failed=0 left=0\n") {
		t.Errorf("reannounce -lost = %d, %q, %q; want 0, %s re-announced, %s warned about, 1 unreadable skipped in the summary and its marker", code, out, errOut, lost.Key.ID(), id)
	}
	if got, err := e.store.Get(t.Context(), lost.Key); err != nil || got.LeaseToken == lost.LeaseToken {
		t.Errorf("%s after reannounce -lost: %+v, %v; want it re-armed under a new lease token", lost.Key.ID(), got, err)
	}

	if code, _, errOut := e.run(t, "forget", id); code == 0 || !strings.Contains(errOut, id) {
		t.Errorf("forget %s = %d, %q; want a failure naming it (it cannot read it)", id, code, errOut)
	}
}

// TestUnreadableItemQuoted: the aws dynamodb get-item command unknown
// prints for an unreadable item is one a POSIX shell runs as written,
// passing the item's partition key intact, whatever it holds: an item
// written by hand may have a pk with ' or " (or $, a backslash), which
// must neither break the command nor run anything. The command runs here
// under sh, with an aws on PATH that prints its arguments.
func TestUnreadableItemQuoted(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	rec := idempotency.Record{
		Key: idempotency.NewKey("acme", "x"), Status: idempotency.StatusUnknown, Route: "POST /v1/charges", Fingerprint: "f00d",
		External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(-24 * time.Hour),
		CreatedAt: now.Add(-48 * time.Hour), UpdatedAt: now.Add(-48 * time.Hour),
	}
	const id = `acme#it's "by hand" $(touch pwned) \ '$HOME'`
	item := dynamo.ItemFromRecord(rec)
	item[dynamo.AttrPK] = &dynamodbtypes.AttributeValueMemberS{Value: id}
	delete(item, dynamo.AttrExpiresAtMS) // unreadable, as in TestUnreadableItem
	if _, err := e.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(e.names.ByLogicalID["IdempotencyTable"]), Item: item}); err != nil {
		t.Fatal(err)
	}
	_, _, errOut := e.run(t, "unknown")
	const intro = "inspect it with "
	i := strings.Index(errOut, intro)
	if i < 0 {
		t.Fatalf("unknown stderr = %q, want %q and a command", errOut, intro)
	}
	command, _, _ := strings.Cut(errOut[i+len(intro):], "\n")

	dir := t.TempDir()
	fake := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"
	if err := os.WriteFile(filepath.Join(dir, "aws"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "sh", "-c", command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", command, err)
	}
	args := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	want := []string{"dynamodb", "get-item", "--table-name", e.names.ByLogicalID["IdempotencyTable"], "--key"}
	if len(args) != len(want)+1 || !slices.Equal(args[:len(want)], want) {
		t.Fatalf("sh -c %q ran aws %q, want aws %q and the key", command, args, want)
	}
	var key map[string]map[string]string
	if err := json.Unmarshal([]byte(args[len(want)]), &key); err != nil || key[dynamo.AttrPK]["S"] != id {
		t.Errorf("--key %q = %v (%v), want {%q: {\"S\": %q}}", args[len(want)], key, err, dynamo.AttrPK, id)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Errorf("sh -c %q ran the command substitution in the item's pk", command)
	}
}
