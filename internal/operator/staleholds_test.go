package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/operator"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/refunds"
)

// heldBy is a hold a test makes: on the payment named pay (holds of one name
// are on one payment), for tenant's refund under the key rawKey(raw), with its
// key's record in status ("" for no record), last changed ago, expiring in
// expires from now.
type heldBy struct {
	pay     string
	tenant  string
	raw     string
	amount  int64
	status  idempotency.Status
	ago     time.Duration
	expires time.Duration
}

// stored is a hold as made: its payment and key.
type stored struct {
	heldBy
	p   payments.Payment
	key idempotency.Key
}

// makeHolds writes the payments and records of holds: each payment of 2500,
// succeeded, holding its holds' amounts.
func (e *env) makeHolds(t *testing.T, holds []heldBy) map[string]stored {
	t.Helper()
	byPay := map[string]payments.Payment{}
	made := map[string]stored{}
	for _, h := range holds {
		p, ok := byPay[h.pay]
		if !ok {
			p = e.payment(t, h.tenant, "tok_visa", time.Hour, 0)
			p.Status, p.ProviderChargeID, p.Refundable, p.Holds = payments.StatusSucceeded, "ch_"+h.pay, p.Amount, map[string]int64{}
		}
		key := idempotency.NewKey(h.tenant, rawKey(h.raw))
		p.Holds[key.Hash] = h.amount
		p.Refundable -= h.amount
		byPay[h.pay] = p
		if h.status != "" {
			e.put(t, refundRecord(key, h.status, h.ago, h.expires))
		}
		made[h.raw] = stored{heldBy: h, key: key}
	}
	for _, p := range byPay {
		e.putPayment(t, p, 0)
	}
	for raw, s := range made {
		s.p = byPay[s.pay]
		made[raw] = s
	}
	return made
}

// rawKey is the Idempotency-Key of the hold named name: a string no
// listing has but by showing the key.
func rawKey(name string) string { return "idem-" + name + "-raw" }

// refundRecord is the record of a refund under key in status, last changed
// ago, expiring in expires from now.
func refundRecord(key idempotency.Key, status idempotency.Status, ago, expires time.Duration) idempotency.Record {
	now := time.Now()
	rec := idempotency.Record{
		Key: key, Status: status, Route: "POST /v1/refunds", Fingerprint: "f00d", External: true,
		LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(expires),
		Request:   []byte(`{"amount":700,"payment":"pay_1"}`),
		CreatedAt: now.Add(-ago), UpdatedAt: now.Add(-ago),
	}
	if status == idempotency.StatusCompleted {
		rec.LeaseToken = ""
		rec.Response = &idempotency.Response{Status: 500, Header: map[string]string{"Content-Type": "application/problem+json"},
			Body: []byte(`{"code":"response_too_large"}`)}
	}
	return rec
}

// holdLine is a line of holds -stale -json.
type holdLine struct {
	Payment          string     `json:"payment"`
	Tenant           string     `json:"tenant"`
	KeyHash          string     `json:"key_hash"`
	Record           string     `json:"record"`
	Refund           string     `json:"refund"`
	Amount           int64      `json:"amount"`
	Currency         string     `json:"currency"`
	RecordStatus     string     `json:"record_status"`
	RecordCreatedAt  *time.Time `json:"record_created_at"`
	RecordUpdatedAt  *time.Time `json:"record_updated_at"`
	RecordExpiresAt  *time.Time `json:"record_expires_at"`
	Age              string     `json:"record_age"`
	AgeFrom          string     `json:"record_age_from"`
	NoRecord         bool       `json:"no_record"`
	RecordUnreadable bool       `json:"record_unreadable"`
	Stale            bool       `json:"stale"`
	Next             string     `json:"next"`
	Command          string     `json:"command"`
	Note             string     `json:"note"`
}

// listed is what the listing says of one hold, by its raw key (which the
// listing never shows: the test maps its key hash back).
type listed struct {
	Raw   string
	Stale bool
	Next  string
}

// staleHolds runs oncectl holds -stale -json args and returns its lines.
func (e *env) staleHolds(t *testing.T, args ...string) ([]holdLine, string) {
	t.Helper()
	code, out, errOut := e.run(t, append([]string{"holds", "-stale", "-json"}, args...)...)
	if code != 0 {
		t.Fatalf("holds -stale -json %v = exit %d: %s", args, code, errOut)
	}
	return decodeLines(t, out), errOut
}

func decodeLines(t *testing.T, out string) []holdLine {
	t.Helper()
	var lines []holdLine
	for line := range strings.Lines(out) {
		var l holdLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		lines = append(lines, l)
	}
	return lines
}

// TestStaleHolds: holds -stale lists the holds across the payments table
// that are stale (no record of their key; a record that will never settle
// them; an UNKNOWN record or an External reservation past its lease,
// unchanged for -older-than), with -all the others too, each with its
// record's state and the command to run next; -tenant keeps one tenant's.
func TestStaleHolds(t *testing.T) {
	const (
		fresh = time.Minute
		old   = 2 * time.Hour
		kept  = 24 * time.Hour // a record's retention left
	)
	mixed := []heldBy{
		{pay: "a", tenant: "acme", raw: "acme-unknown", amount: 700, status: idempotency.StatusUnknown, ago: old, expires: kept},
		{pay: "g", tenant: "globex", raw: "globex-none", amount: 300},
		{pay: "i", tenant: "initech", raw: "initech-fresh", amount: 200, status: idempotency.StatusUnknown, ago: fresh, expires: kept},
		{pay: "i2", tenant: "initech", raw: "initech-older", amount: 100, status: idempotency.StatusUnknown, ago: 3 * time.Hour, expires: kept},
	}
	tests := []struct {
		name  string
		holds []heldBy
		plain []bool // payments with no holds attribute (false: an empty holds map)
		args  []string
		want  []listed
	}{
		{name: "no holds", plain: []bool{true, false}, args: []string{"-all"}},
		{
			name:  "fresh hold",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "fresh", amount: 700, status: idempotency.StatusUnknown, ago: fresh, expires: kept}},
		},
		{
			name:  "fresh hold, -all",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "fresh", amount: 700, status: idempotency.StatusUnknown, ago: fresh, expires: kept}},
			args:  []string{"-all"},
			want:  []listed{{"fresh", false, "wait"}},
		},
		{
			name:  "UNKNOWN record unchanged for -older-than",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "unknown", amount: 700, status: idempotency.StatusUnknown, ago: old, expires: kept}},
			want:  []listed{{"unknown", true, "reannounce"}},
		},
		{
			name:  "UNKNOWN record younger than -older-than",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "unknown", amount: 700, status: idempotency.StatusUnknown, ago: old, expires: kept}},
			args:  []string{"-older-than", "3h", "-all"},
			want:  []listed{{"unknown", false, "wait"}},
		},
		{
			name:  "UNKNOWN record, expired",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "unknown", amount: 700, status: idempotency.StatusUnknown, ago: old, expires: -time.Minute}},
			want:  []listed{{"unknown", true, "reannounce"}},
		},
		{
			name:  "External reservation whose lease ran out",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "abandoned", amount: 700, status: idempotency.StatusInProgress, ago: old, expires: -old}},
			want:  []listed{{"abandoned", true, "reannounce"}},
		},
		{
			name:  "reservation within its lease",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "running", amount: 700, status: idempotency.StatusInProgress, ago: old, expires: time.Minute}},
			args:  []string{"-all"},
			want:  []listed{{"running", false, "wait"}},
		},
		{
			name:  "COMPLETED record, expired",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "dropped", amount: 700, status: idempotency.StatusCompleted, ago: kept, expires: -time.Minute}},
			want:  []listed{{"dropped", true, "settle-hold"}},
		},
		{
			name:  "COMPLETED record within its retention",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "dropped", amount: 700, status: idempotency.StatusCompleted, ago: fresh, expires: kept}},
			want:  []listed{{"dropped", true, "wait"}},
		},
		{
			name:  "hold with no record",
			holds: []heldBy{{pay: "p", tenant: "acme", raw: "forgotten", amount: 700}},
			want:  []listed{{"forgotten", true, "settle-hold -no-record"}},
		},
		{
			name: "two holds on one payment",
			holds: []heldBy{
				{pay: "p", tenant: "acme", raw: "one-fresh", amount: 700, status: idempotency.StatusUnknown, ago: fresh, expires: kept},
				{pay: "p", tenant: "acme", raw: "one-old", amount: 500, status: idempotency.StatusUnknown, ago: old, expires: kept},
			},
			args: []string{"-all"},
			want: []listed{{"one-old", true, "reannounce"}, {"one-fresh", false, "wait"}},
		},
		{
			name: "stale first, -all",
			holds: []heldBy{
				{pay: "p", tenant: "acme", raw: "running", amount: 700, status: idempotency.StatusInProgress, ago: 3 * time.Hour, expires: time.Minute},
				{pay: "q", tenant: "acme", raw: "unknown", amount: 500, status: idempotency.StatusUnknown, ago: old, expires: kept},
			},
			args: []string{"-all"},
			want: []listed{{"unknown", true, "reannounce"}, {"running", false, "wait"}},
		},
		{
			name: "tenants mixed", holds: mixed,
			// No record first, then the oldest change.
			want: []listed{{"globex-none", true, "settle-hold -no-record"}, {"initech-older", true, "reannounce"}, {"acme-unknown", true, "reannounce"}},
		},
		{
			name: "tenants mixed, -all", holds: mixed, args: []string{"-all"},
			want: []listed{
				{"globex-none", true, "settle-hold -no-record"}, {"initech-older", true, "reannounce"}, {"acme-unknown", true, "reannounce"},
				{"initech-fresh", false, "wait"},
			},
		},
		{name: "tenants mixed, -tenant acme", holds: mixed, args: []string{"-tenant", "acme"}, want: []listed{{"acme-unknown", true, "reannounce"}}},
		{
			name: "tenants mixed, -tenant initech -all", holds: mixed, args: []string{"-tenant", "initech", "-all"},
			want: []listed{{"initech-older", true, "reannounce"}, {"initech-fresh", false, "wait"}},
		},
		{name: "tenants mixed, -tenant hooli", holds: mixed, args: []string{"-tenant", "hooli", "-all"}},
		{name: "tenants mixed, -limit 2", holds: mixed, args: []string{"-limit", "2"}, want: []listed{{"globex-none", true, "settle-hold -no-record"}, {"initech-older", true, "reannounce"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			for _, none := range tt.plain {
				p := e.payment(t, "acme", "tok_visa", time.Hour, 0)
				if !none {
					p.Status, p.ProviderChargeID, p.Refundable, p.Holds = payments.StatusSucceeded, "ch_settled", p.Amount, map[string]int64{}
				}
				e.putPayment(t, p, 0)
			}
			made := e.makeHolds(t, tt.holds)
			lines, errOut := e.staleHolds(t, tt.args...)
			byHash := map[string]stored{}
			for _, s := range made {
				byHash[s.key.Hash] = s
			}
			var got []listed
			for _, l := range lines {
				s, ok := byHash[l.KeyHash]
				if !ok {
					t.Fatalf("line %+v: no such hold", l)
				}
				got = append(got, listed{s.raw, l.Stale, l.Next})
				checkLine(t, l, s)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("holds -stale %v (-want +got):\n%s", tt.args, diff)
			}
			stale := 0
			for _, w := range tt.want {
				if w.Stale {
					stale++
				}
			}
			if want := fmt.Sprintf("%d hold(s) listed, %d stale", len(tt.want), stale); !strings.Contains(errOut, want) {
				t.Errorf("stderr %q, want it to say %q", errOut, want)
			}
		})
	}
}

// checkLine fails the test unless l shows s as it is: its payment, key,
// refund, amount and record, the command to run naming them, never a raw
// key.
func checkLine(t *testing.T, l holdLine, s stored) {
	t.Helper()
	if l.Payment != s.p.PK || l.Tenant != s.tenant || l.Record != s.key.ID() || l.Refund != refunds.ID(s.key) ||
		l.Amount != s.amount || l.Currency != s.p.Currency || l.RecordStatus != string(s.status) || l.NoRecord != (s.status == "") {
		t.Errorf("line %+v, want the hold of %d by %s on %s, its record %q", l, s.amount, s.key.ID(), s.p.PK, s.status)
	}
	if s.status != "" && (l.RecordCreatedAt == nil || l.RecordUpdatedAt == nil || l.RecordExpiresAt == nil || l.Age == "" || l.AgeFrom != "created_at") {
		t.Errorf("line %+v: want its record's creation, last change, expiry and age (from created_at)", l)
	}
	wantIn := map[string][]string{
		"settle-hold":            {"oncectl settle-hold", "-hold " + s.key.Hash, fmt.Sprintf("-confirm %d", s.amount), s.p.PK},
		"settle-hold -no-record": {"oncectl settle-hold", "-no-record", "-hold " + s.key.Hash, fmt.Sprintf("-confirm %d", s.amount), s.p.PK},
		"reannounce":             {"oncectl reannounce " + s.key.ID()},
		"wait":                   {},
	}[l.Next]
	for _, w := range wantIn {
		if !strings.Contains(l.Command, w) {
			t.Errorf("line %s: command %q, want it to hold %q", l.Next, l.Command, w)
		}
	}
	if l.Next == "wait" && l.Command != "" {
		t.Errorf("line %+v: a hold to wait for has no command", l)
	}
	if l.NoRecord && !strings.Contains(l.Note, "its key has no record: it was forgotten (`oncectl forget`), or deleted by TTL") {
		t.Errorf("line %+v: want the note on a hold with no record", l)
	}
	if !l.NoRecord && l.Note == "" {
		t.Errorf("line %+v: want a note on what settles it", l)
	}
	if b, _ := json.Marshal(l); strings.Contains(string(b), rawKey(s.raw)) {
		t.Errorf("line %s holds the raw key %q", b, rawKey(s.raw))
	}
}

// scanCounting is a DynamoDB client that counts its Scan pages and checks
// what each returned.
type scanCounting struct {
	*dynamodb.Client
	pages int
	items int
	bad   []string // items that should not have come back
}

func (c *scanCounting) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	out, err := c.Client.Scan(ctx, in, opts...)
	if err == nil {
		c.pages++
		c.items += len(out.Items)
		for _, item := range out.Items {
			_, held := item[payments.AttrHolds]
			_, customer := item["customer"]
			_, source := item["source"]
			if !held || customer || source {
				c.bad = append(c.bad, paymentOf(item))
			}
		}
	}
	return out, err
}

func paymentOf(item map[string]dynamodbtypes.AttributeValue) string {
	if s, ok := item[payments.KeyAttr].(*dynamodbtypes.AttributeValueMemberS); ok {
		return s.Value
	}
	return "(no pk)"
}

// TestStaleHoldsPages: the listing reads every page of its Scan, which
// brings back only payments with holds, and only what it shows of them
// (never a payment's customer or source); when the page bound cuts the
// Scan, it says so.
func TestStaleHoldsPages(t *testing.T) {
	e := newEnv(t)
	var holds []heldBy
	for i := range 7 {
		holds = append(holds, heldBy{pay: fmt.Sprint(i), tenant: "acme", raw: fmt.Sprintf("paged-%d", i), amount: 100 + int64(i)})
	}
	made := e.makeHolds(t, holds)
	for range 5 {
		e.payment(t, "acme", "tok_visa", time.Hour, 0)
	}
	cfg, err := config.FromEnv(func(k string) string { return e.vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, pages int) (*scanCounting, []holdLine, string) {
		t.Helper()
		db := &scanCounting{Client: e.db}
		var out, errOut bytes.Buffer
		tool := operator.New(cfg, db, e.sqs, &out, &errOut)
		operator.SetScanLimit(tool, 2)
		operator.SetScanPages(tool, pages)
		if code := tool.Run(t.Context(), []string{"holds", "-stale", "-json"}); code != 0 {
			t.Fatalf("holds -stale = exit %d: %s", code, errOut.String())
		}
		return db, decodeLines(t, out.String()), errOut.String()
	}

	db, lines, errOut := run(t, 100)
	if db.pages < 6 {
		t.Errorf("Scan pages = %d, want at least 6 (12 payments, 2 a page)", db.pages)
	}
	if db.items != len(made) || len(db.bad) != 0 {
		t.Errorf("the Scan returned %d items, %v without holds or with a customer or source; want the %d payments with holds, projected",
			db.items, db.bad, len(made))
	}
	got := map[string]bool{}
	for _, l := range lines {
		got[l.KeyHash] = true
	}
	for raw, s := range made {
		if !got[s.key.Hash] {
			t.Errorf("hold %s on %s not listed", raw, s.p.PK)
		}
	}
	if len(lines) != len(made) || strings.Contains(errOut, "warning") {
		t.Errorf("listed %d holds (%q), want %d and no warning", len(lines), errOut, len(made))
	}

	_, lines, errOut = run(t, 1)
	if len(lines) >= len(made) || !strings.Contains(errOut, "warning: the Scan stopped after 1 pages: the holds of the payments it did not reach are missing") {
		t.Errorf("with one Scan page: %d holds listed, stderr %q; want fewer than %d and the warning", len(lines), errOut, len(made))
	}
}

// TestStaleHoldsOutput: the table shows each hold with the command to run
// next, never a raw key nor a payment's private fields; the listing's flags
// are checked.
func TestStaleHoldsOutput(t *testing.T) {
	e := newEnv(t)
	made := e.makeHolds(t, []heldBy{
		{pay: "p", tenant: "acme", raw: "refund-secret-key", amount: 700, status: idempotency.StatusUnknown, ago: 2 * time.Hour, expires: time.Hour},
		{pay: "q", tenant: "acme", raw: "refund-other-secret", amount: 300},
		{pay: "r", tenant: "acme", raw: "refund-third-secret", amount: 200},
	})
	code, out, errOut := e.run(t, "holds", "-stale")
	if code != 0 {
		t.Fatalf("holds -stale = exit %d: %s", code, errOut)
	}
	for _, s := range made {
		if !strings.Contains(out, s.p.PK) || !strings.Contains(out, s.key.Hash) {
			t.Errorf("table %q, want the hold of %s on %s", out, s.key.Hash, s.p.PK)
		}
	}
	for _, w := range []string{"PAYMENT", "KEY HASH", "RECORD", "AGE", "STALE", "NEXT", "reannounce", "settle-hold -no-record", "UNKNOWN", "no record"} {
		if !strings.Contains(out, w) {
			t.Errorf("table %q, want it to show %q", out, w)
		}
	}
	// A hold with no record is marked check, not yes, and the terms of
	// settle-hold -no-record are said once.
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if strings.Contains(line, "no record") && (len(f) < 3 || f[len(f)-3] != "check") {
			t.Errorf("table line %q, want its STALE column check", line)
		}
		if strings.Contains(line, "reannounce") && (len(f) < 2 || f[len(f)-2] != "yes") {
			t.Errorf("table line %q, want its STALE column yes", line)
		}
	}
	if n := strings.Count(errOut, operator.NoRecordNote); n != 1 {
		t.Errorf("stderr %q says noRecordNote %d times, want once", errOut, n)
	}
	if _, _, other := e.run(t, "holds", "-stale", "-tenant", "globex"); strings.Contains(other, operator.NoRecordNote) {
		t.Errorf("stderr %q, want no note when no hold with no record is listed", other)
	}
	_, jsonOut, _ := e.run(t, "holds", "-stale", "-all", "-json")
	for _, s := range []string{rawKey("refund-secret-key"), rawKey("refund-other-secret"), rawKey("refund-third-secret"), secretCustomer, secretDescription, secretMetadata, "tok_visa"} {
		if strings.Contains(out+errOut+jsonOut, s) {
			t.Errorf("the listing shows %q:\n%s%s%s", s, out, errOut, jsonOut)
		}
	}
	if !strings.Contains(errOut, "3 hold(s) listed, 3 stale") {
		t.Errorf("stderr %q, want the count", errOut)
	}

	for _, args := range [][]string{
		{"holds", "-stale", "acme#" + made["refund-secret-key"].p.ID},
		{"holds", "-stale", "-payment", made["refund-secret-key"].p.ID},
		{"holds", "-stale", "-tenant", "not a tenant"},
		{"holds", "-stale", "-limit", "0"},
		{"holds", "-stale", "-older-than", "-1m"},
		{"holds", "-all"},
		{"holds", "-json", made["refund-secret-key"].p.PK},
		{"holds", "-older-than", "1h", made["refund-secret-key"].p.PK},
		{"holds", "-limit", "5", made["refund-secret-key"].p.PK},
	} {
		if code, _, errOut := e.run(t, args...); code != 2 {
			t.Errorf("oncectl %v = exit %d %q, want 2", args, code, errOut)
		}
	}
	// The one-payment view is as it was.
	if code, out, _ := e.run(t, "holds", made["refund-secret-key"].p.PK); code != 0 || !strings.Contains(out, `"record_status": "UNKNOWN"`) {
		t.Errorf("holds PAYMENT = exit %d %s, want the payment's hold", code, out)
	}
}

// TestStaleHoldsAge: the listing judges an UNKNOWN record, or an External
// reservation past its lease, by its age since its request began (its
// created_at, which a client's redrive and the sweeper's restore keep),
// not by its last change (which both reset); by its last change only when
// it has no created_at; and a record with neither is stale, of no age.
func TestStaleHoldsAge(t *testing.T) {
	const never = -1 // no such timestamp
	tests := []struct {
		name             string
		status           idempotency.Status
		created, updated time.Duration // ago, or never
		expires          time.Duration
		wantStale        bool
		wantFrom         string
	}{
		{name: "UNKNOWN, made long ago, changed just now", status: idempotency.StatusUnknown, created: 72 * time.Hour, updated: time.Minute, expires: 24 * time.Hour, wantStale: true, wantFrom: "created_at"},
		{name: "UNKNOWN, made just now", status: idempotency.StatusUnknown, created: time.Minute, updated: time.Minute, expires: 24 * time.Hour, wantFrom: "created_at"},
		{name: "reservation past its lease, made long ago, restored just now", status: idempotency.StatusInProgress, created: 3 * time.Hour, updated: time.Minute, expires: -time.Minute, wantStale: true, wantFrom: "created_at"},
		{name: "UNKNOWN, no created_at, changed long ago", status: idempotency.StatusUnknown, created: never, updated: 2 * time.Hour, expires: 24 * time.Hour, wantStale: true, wantFrom: "updated_at"},
		{name: "UNKNOWN, no created_at, changed just now", status: idempotency.StatusUnknown, created: never, updated: time.Minute, expires: 24 * time.Hour, wantFrom: "updated_at"},
		{name: "UNKNOWN, no timestamps", status: idempotency.StatusUnknown, created: never, updated: never, expires: 24 * time.Hour, wantStale: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.makeHolds(t, []heldBy{{pay: "p", tenant: "acme", raw: "held", amount: 700}})["held"]
			rec := refundRecord(s.key, tt.status, 0, tt.expires)
			now := time.Now()
			rec.CreatedAt, rec.UpdatedAt = now.Add(-tt.created), now.Add(-tt.updated)
			if tt.created == never {
				rec.CreatedAt = time.Time{}
			}
			if tt.updated == never {
				rec.UpdatedAt = time.Time{}
			}
			e.put(t, rec)
			lines, _ := e.staleHolds(t, "-all")
			if len(lines) != 1 {
				t.Fatalf("holds -stale -all listed %d holds, want 1", len(lines))
			}
			l := lines[0]
			if l.Stale != tt.wantStale || l.AgeFrom != tt.wantFrom {
				t.Errorf("line %+v: stale %v, age from %q; want %v, %q", l, l.Stale, l.AgeFrom, tt.wantStale, tt.wantFrom)
			}
			if (l.RecordCreatedAt == nil) != (tt.created == never) || (l.RecordUpdatedAt == nil) != (tt.updated == never) {
				t.Errorf("line %+v: want record_created_at and record_updated_at as the record has them", l)
			}
			if (l.Age == "") != (tt.wantFrom == "") {
				t.Errorf("line %+v: age %q, want one only from a timestamp", l, l.Age)
			}
			code, out, errOut := e.run(t, "holds", "-stale", "-all")
			if code != 0 || strings.Contains(out+errOut, "0001") || strings.Contains(out, "2562047h") {
				t.Errorf("holds -stale -all = exit %d, %s%s: want no age from the zero time", code, out, errOut)
			}
		})
	}
}

// TestStaleHoldsRedriven: a client's retry past UnknownRedrive re-marks its
// UNKNOWN record (MarkUnknown, a new updated_at): the hold, held since the
// record's request began, stays stale.
func TestStaleHoldsRedriven(t *testing.T) {
	e := newEnv(t)
	s := e.makeHolds(t, []heldBy{{pay: "p", tenant: "acme", raw: "stuck", amount: 700, status: idempotency.StatusUnknown, ago: 72 * time.Hour, expires: time.Hour}})["stuck"]
	rec, err := e.store.Get(t.Context(), s.key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-30 * time.Second)
	if err := e.store.MarkUnknown(t.Context(), s.key, rec.LeaseToken, idempotency.NewToken(), now.Add(24*time.Hour), now); err != nil {
		t.Fatal(err)
	}
	lines, _ := e.staleHolds(t)
	if len(lines) != 1 || lines[0].Next != "reannounce" {
		t.Errorf("holds -stale listed %+v, want the hold UNKNOWN for 72h, to reannounce", lines)
	}
}
