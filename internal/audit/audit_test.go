package audit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/abandoned"
	"github.com/oncehq/once/internal/audit"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/metrics"
)

// seeded is the idempotency table of one test, its records written as the
// DynamoDB store writes them, and which of them are stuck.
type seeded struct {
	db    *dynamodb.Client
	table string
	now   time.Time
	stuck []string // record IDs
	raw   []string // every raw key: never in a log
}

// kinds are the records seeded for each tenant: whether each is stuck.
var kinds = []struct {
	name     string
	status   idempotency.Status
	external bool
	expires  time.Duration // from now
	legacy   bool          // the item carries the TTL attribute (before the upgrade)
	written  time.Duration // UpdatedAt from now; 49 hours ago when 0
	stuck    bool
}{
	{name: "unknown-armed", status: idempotency.StatusUnknown, external: true, expires: time.Hour},
	{name: "unknown-lost", status: idempotency.StatusUnknown, external: true, expires: -abandoned.LostCheckAfter - time.Minute, stuck: true},
	// Written UNKNOWN before UNKNOWN records lost their TTL attribute: no
	// check is armed for it, though its expiry is ahead.
	{name: "unknown-legacy", status: idempotency.StatusUnknown, external: true, expires: time.Hour, legacy: true, stuck: true},
	{name: "external-lost", status: idempotency.StatusInProgress, external: true, expires: -abandoned.LostCheckAfter - time.Minute, stuck: true},
	{name: "external-legacy", status: idempotency.StatusInProgress, external: true, expires: -time.Hour, legacy: true, stuck: true},
	{name: "external-legacy-just-expired", status: idempotency.StatusInProgress, external: true, expires: -time.Minute, legacy: true},
	{name: "external-just-expired", status: idempotency.StatusInProgress, external: true, expires: -time.Minute},
	// Its check lost by LostCheckAfter, but its write is recent enough
	// for the sweeper's stream retries to arm it still.
	{name: "external-lost-recently-written", status: idempotency.StatusInProgress, external: true, expires: -abandoned.LostCheckAfter - time.Minute, written: -40 * time.Minute},
	{name: "external-within-lease", status: idempotency.StatusInProgress, external: true, expires: time.Minute},
	{name: "atomic-expired", status: idempotency.StatusInProgress, expires: -48 * time.Hour},
	{name: "completed", status: idempotency.StatusCompleted, external: true, expires: -48 * time.Hour},
}

var tenants = []string{"acme", "globex", "initech"}

// seed writes every kind of record for every tenant into a fresh
// idempotency table (TTL off, as on AWS within minutes: DynamoDB Local
// would delete the expired ones within seconds).
func seed(t *testing.T) *seeded {
	t.Helper()
	db := dynamotest.Client(t)
	names := dynamotest.Tables(t, db)
	s := &seeded{db: db, table: names.ByLogicalID["IdempotencyTable"], now: time.Now()}
	if _, err := db.UpdateTimeToLive(t.Context(), &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(s.table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(dynamo.AttrExpiresAt), Enabled: aws.Bool(false)},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range tenants {
		for _, k := range kinds {
			raw := "secret-key-" + tenant + "-" + k.name
			written := k.written
			if written == 0 {
				written = -49 * time.Hour
			}
			rec := idempotency.Record{
				Key: idempotency.NewKey(tenant, raw), Status: k.status, Route: "POST /v1/charges", Fingerprint: "f00d",
				External: k.external, LeaseToken: idempotency.NewToken(), ExpiresAt: s.now.Add(k.expires),
				CreatedAt: s.now.Add(-50 * time.Hour), UpdatedAt: s.now.Add(written),
				Request: []byte(`{"source":"secret-card-token"}`),
			}
			if k.status == idempotency.StatusCompleted {
				rec.Response = &idempotency.Response{Status: 201, Body: []byte(`{"secret":"body"}`)}
			}
			item := dynamo.ItemFromRecord(rec)
			if k.legacy {
				// Written before External reservations (and UNKNOWN
				// records) lost their TTL attribute: a day past the
				// lease (the expiry).
				item[dynamo.AttrExpiresAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(rec.ExpiresAt.Add(dynamo.ExternalReservationTTL).Unix(), 10)}
			}
			if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}); err != nil {
				t.Fatal(err)
			}
			s.raw = append(s.raw, raw)
			if k.stuck {
				s.stuck = append(s.stuck, rec.Key.ID())
			}
		}
	}
	slices.Sort(s.stuck)
	return s
}

// run is one auditor's output.
type run struct {
	logs, metrics bytes.Buffer
}

func (s *seeded) auditor(t *testing.T, r *run, cfg audit.Config) *audit.Auditor {
	t.Helper()
	cfg.DB, cfg.TableName = s.db, s.table
	cfg.Logger = slog.New(slog.NewJSONHandler(&r.logs, nil))
	cfg.Metrics = metrics.New(&r.metrics, "once", map[string]string{"Service": "auditor"})
	cfg.Now = func() time.Time { return s.now }
	a, err := audit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// figures returns the values of the EMF metrics in r's metric lines, each
// line checked to be an EMF document declaring its metric.
func (r *run) figures(t *testing.T) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.metrics.Bytes()))
	for sc.Scan() {
		var doc struct {
			AWS struct {
				Timestamp         int64
				CloudWatchMetrics []struct {
					Namespace  string
					Dimensions [][]string
					Metrics    []struct{ Name, Unit string }
				}
			} `json:"_aws"`
		}
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil || len(doc.AWS.CloudWatchMetrics) != 1 {
			t.Fatalf("metric line %s: %v, want one EMF directive", sc.Text(), err)
		}
		var fields map[string]any
		_ = json.Unmarshal(sc.Bytes(), &fields)
		d := doc.AWS.CloudWatchMetrics[0]
		if d.Namespace != "once" || fields["Service"] != "auditor" || !cmp.Equal(d.Dimensions, [][]string{{"Service"}}) {
			t.Errorf("metric line %s: want namespace once, dimension Service auditor", sc.Text())
		}
		for _, m := range d.Metrics {
			v, ok := fields[m.Name].(float64)
			if !ok {
				t.Errorf("metric line %s: no value for %s", sc.Text(), m.Name)
			}
			out[m.Name] = append(out[m.Name], v)
		}
	}
	return out
}

// stamps returns the EMF timestamps (Unix milliseconds) of r's metric
// lines, in order.
func (r *run) stamps(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	sc := bufio.NewScanner(bytes.NewReader(r.metrics.Bytes()))
	for sc.Scan() {
		var doc struct {
			AWS struct{ Timestamp int64 } `json:"_aws"`
		}
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			t.Fatalf("metric line %s: %v", sc.Text(), err)
		}
		out = append(out, doc.AWS.Timestamp)
	}
	return out
}

// stuckLogged returns the record IDs of r's "abandoned record" lines,
// checking each line's fields.
func (r *run) stuckLogged(t *testing.T, s *seeded) []string {
	t.Helper()
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(r.logs.Bytes()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %s: %v", sc.Text(), err)
		}
		if line["msg"] != "abandoned record" {
			continue
		}
		id, _ := line["record"].(string)
		ids = append(ids, id)
		kind := abandoned.KindLost
		if s.legacy(id) {
			kind = abandoned.KindLegacy
		}
		if line["level"] != "WARN" || line["kind"] != kind || line["age"] != "50h0m0s" || line["age_from"] != "created_at" ||
			(line["status"] != "UNKNOWN" && line["status"] != "IN_PROGRESS") {
			t.Errorf("log line %s: want WARN, kind %s, status UNKNOWN or IN_PROGRESS, age 50h0m0s from created_at", sc.Text(), kind)
		}
	}
	for _, raw := range s.raw {
		if strings.Contains(r.logs.String(), raw) || strings.Contains(r.metrics.String(), raw) {
			t.Errorf("the output holds the raw key %q", raw)
		}
	}
	if strings.Contains(r.logs.String(), "secret") {
		t.Errorf("the logs hold a body or a raw key:\n%s", r.logs.String())
	}
	return ids
}

// legacy reports whether id is a seeded legacy record.
func (s *seeded) legacy(id string) bool {
	for _, tenant := range tenants {
		for _, k := range kinds {
			if k.legacy && idempotency.NewKey(tenant, "secret-key-"+tenant+"-"+k.name).ID() == id {
				return true
			}
		}
	}
	return false
}

// TestAuditOneSegment: with one segment a run reads the whole table and
// counts exactly the stuck records (UNKNOWN or External reservations whose
// check is lost, a legacy External reservation past its lease, a legacy
// UNKNOWN record, kind legacy), logging
// each once by its ID, and emits abandoned_records with the count and
// audit_incomplete 0.
func TestAuditOneSegment(t *testing.T) {
	s := seed(t)
	var r run
	res, err := s.auditor(t, &r, audit.Config{Segments: 1}).Audit(t.Context(), s.now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stuck != len(s.stuck) || !res.Complete || res.Scanned != len(tenants)*len(kinds) {
		t.Errorf("Audit = %+v, want %d stuck of %d scanned, complete", res, len(s.stuck), len(tenants)*len(kinds))
	}
	got := r.stuckLogged(t, s)
	slices.Sort(got)
	if diff := cmp.Diff(s.stuck, got); diff != "" {
		t.Errorf("records logged stuck (-want +got):\n%s", diff)
	}
	want := map[string][]float64{audit.MetricAbandoned: {float64(len(s.stuck))}, audit.MetricIncomplete: {0}}
	if diff := cmp.Diff(want, r.figures(t)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestAuditSegments: audit.Segments runs, one an hour, each scanning the
// segment of its hour, cover every segment once and count every stuck
// record exactly once in all; each emits abandoned_records, 0 included,
// stamped with the time it was scheduled at. The run audit.Segments hours later scans the same segment again: a
// record is seen every audit.Segments hours.
func TestAuditSegments(t *testing.T) {
	s := seed(t)
	start := time.Date(2026, 11, 25, 0, 17, 0, 0, time.UTC)
	var all []string
	total := 0
	seen := map[int]bool{}
	for h := range audit.Segments {
		var r run
		at := start.Add(time.Duration(h) * time.Hour)
		res, err := s.auditor(t, &r, audit.Config{}).Audit(t.Context(), at)
		if err != nil {
			t.Fatal(err)
		}
		want := int((at.Unix() / 3600) % audit.Segments)
		if res.Segment != want || res.Segments != audit.Segments || !res.Complete {
			t.Errorf("Audit(%s) = %+v, want segment %d of %d, complete", at, res, want, audit.Segments)
		}
		if seen[res.Segment] {
			t.Errorf("Audit(%s) scanned segment %d again within %d hours", at, res.Segment, audit.Segments)
		}
		seen[res.Segment] = true
		if next := at.Add(audit.Segments * time.Hour); audit.Segment(next, audit.Segments) != res.Segment {
			t.Errorf("Segment(%s) = %d, want %d, the segment of %s", next, audit.Segment(next, audit.Segments), res.Segment, at)
		}
		total += res.Stuck
		all = append(all, r.stuckLogged(t, s)...)
		f := r.figures(t)
		if diff := cmp.Diff(map[string][]float64{audit.MetricAbandoned: {float64(res.Stuck)}, audit.MetricIncomplete: {0}}, f); diff != "" {
			t.Errorf("hour %d metrics (-want +got):\n%s", h, diff)
		}
		// Stamped with the hour the run was scheduled in, whenever it ran
		// (the clock is now, not at): a late run's sighting stays in its
		// hour's period.
		if diff := cmp.Diff([]int64{at.UnixMilli(), at.UnixMilli()}, r.stamps(t)); diff != "" {
			t.Errorf("hour %d metric timestamps (-want +got):\n%s", h, diff)
		}
	}
	slices.Sort(all)
	if total != len(s.stuck) {
		t.Errorf("stuck records counted over %d hours = %d, want %d", audit.Segments, total, len(s.stuck))
	}
	if diff := cmp.Diff(s.stuck, all); diff != "" {
		t.Errorf("records logged stuck over %d hours (-want +got):\n%s", audit.Segments, diff)
	}
}

// TestAuditUnreadable: an item the filter reads (UNKNOWN) that does not
// decode as a record is counted, and logged at Warn with kind unreadable
// and its ID as record (oncectl unknown skips it, naming it the same way).
func TestAuditUnreadable(t *testing.T) {
	s := seed(t)
	rec := idempotency.Record{
		Key: idempotency.NewKey("acme", "secret-key-unreadable"), Status: idempotency.StatusUnknown, Route: "POST /v1/charges",
		Fingerprint: "f00d", External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: s.now.Add(time.Hour),
	}
	item := dynamo.ItemFromRecord(rec)
	delete(item, dynamo.AttrExpiresAtMS)
	if _, err := s.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}); err != nil {
		t.Fatal(err)
	}
	var r run
	res, err := s.auditor(t, &r, audit.Config{Segments: 1}).Audit(t.Context(), s.now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stuck != len(s.stuck)+1 {
		t.Errorf("Audit = %+v, want %d stuck (the unreadable item too)", res, len(s.stuck)+1)
	}
	want := map[string][]float64{audit.MetricAbandoned: {float64(len(s.stuck) + 1)}, audit.MetricIncomplete: {0}}
	if diff := cmp.Diff(want, r.figures(t)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(r.logs.Bytes()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %s: %v", sc.Text(), err)
		}
		if line["kind"] == abandoned.KindUnreadable {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 || lines[0]["msg"] != "abandoned record" || lines[0]["level"] != "WARN" || lines[0]["record"] != rec.Key.ID() {
		t.Errorf("unreadable lines %v, want one WARN abandoned record line with record %s", lines, rec.Key.ID())
	}
	if strings.Contains(r.logs.String(), "secret-key") {
		t.Errorf("the logs hold a raw key:\n%s", r.logs.String())
	}
}

// TestAuditLogBound: a run logs at most MaxLogged stuck records, one line
// each, then one Warn line saying how many more it found and did not list
// (oncectl unknown lists them); abandoned_records counts them all.
func TestAuditLogBound(t *testing.T) {
	s := seed(t)
	tests := []struct {
		name      string
		cfg       audit.Config
		wantLines int
	}{
		{name: "one", cfg: audit.Config{Segments: 1, MaxLogged: 1}, wantLines: 1},
		{name: "across pages", cfg: audit.Config{Segments: 1, MaxLogged: 4, PageItems: 3}, wantLines: 4},
		{name: "all but one", cfg: audit.Config{Segments: 1, MaxLogged: len(s.stuck) - 1}, wantLines: len(s.stuck) - 1},
		{name: "exactly all", cfg: audit.Config{Segments: 1, MaxLogged: len(s.stuck)}, wantLines: len(s.stuck)},
		{name: "default", cfg: audit.Config{Segments: 1}, wantLines: len(s.stuck)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r run
			res, err := s.auditor(t, &r, tt.cfg).Audit(t.Context(), s.now)
			if err != nil {
				t.Fatal(err)
			}
			if res.Stuck != len(s.stuck) {
				t.Errorf("Audit = %+v, want %d stuck", res, len(s.stuck))
			}
			if got := len(r.stuckLogged(t, s)); got != tt.wantLines {
				t.Errorf("%d records logged stuck, want %d", got, tt.wantLines)
			}
			want := map[string][]float64{audit.MetricAbandoned: {float64(len(s.stuck))}, audit.MetricIncomplete: {0}}
			if diff := cmp.Diff(want, r.figures(t)); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			var more []map[string]any
			sc := bufio.NewScanner(bytes.NewReader(r.logs.Bytes()))
			for sc.Scan() {
				var line map[string]any
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatalf("log line %s: %v", sc.Text(), err)
				}
				if msg, _ := line["msg"].(string); strings.HasPrefix(msg, "abandoned records not listed") {
					more = append(more, line)
				}
			}
			unlisted := len(s.stuck) - tt.wantLines
			switch {
			case unlisted == 0 && len(more) != 0:
				t.Errorf("lines on records not listed: %v, want none", more)
			case unlisted > 0 && len(more) != 1:
				t.Errorf("%d lines on records not listed, want 1 in\n%s", len(more), r.logs.String())
			case unlisted > 0:
				line := more[0]
				msg, _ := line["msg"].(string)
				if line["level"] != "WARN" || line["not_listed"] != float64(unlisted) || line["listed"] != float64(tt.wantLines) ||
					!strings.Contains(msg, "oncectl unknown") {
					t.Errorf("log line %v, want WARN, not_listed %d, listed %d, pointing to oncectl unknown", line, unlisted, tt.wantLines)
				}
			}
		})
	}
}

// TestAuditBounded: a run stopped by its page bound or by its deadline
// emits audit_incomplete 1 and the count of what it read.
func TestAuditBounded(t *testing.T) {
	s := seed(t)
	tests := []struct {
		name      string
		cfg       audit.Config
		timeout   time.Duration // the invocation's, 0 for none
		wantPages int
	}{
		{name: "page bound", cfg: audit.Config{Segments: 1, MaxPages: 2, PageItems: 3}, wantPages: 2},
		{name: "deadline", cfg: audit.Config{Segments: 1, Margin: time.Minute}, timeout: 30 * time.Second, wantPages: 0},
		{name: "whole segment", cfg: audit.Config{Segments: 1, PageItems: 3, Margin: time.Minute}, timeout: 2 * time.Minute, wantPages: (len(tenants)*len(kinds)+2)/3 + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			var r run
			res, err := s.auditor(t, &r, tt.cfg).Audit(ctx, s.now)
			if err != nil {
				t.Fatal(err)
			}
			complete := tt.name == "whole segment"
			if res.Pages != tt.wantPages || res.Complete != complete {
				t.Errorf("Audit = %+v, want %d pages, complete %t", res, tt.wantPages, complete)
			}
			incomplete := 1.0
			if complete {
				incomplete = 0
			}
			want := map[string][]float64{audit.MetricAbandoned: {float64(res.Stuck)}, audit.MetricIncomplete: {incomplete}}
			if diff := cmp.Diff(want, r.figures(t)); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			if got := len(r.stuckLogged(t, s)); got != res.Stuck {
				t.Errorf("%d records logged stuck, want %d", got, res.Stuck)
			}
			if !complete && !strings.Contains(r.logs.String(), `"msg":"audit incomplete`) {
				t.Errorf("no audit incomplete line in\n%s", r.logs.String())
			}
		})
	}
}

// TestAuditScanError: a Scan that fails fails the run (the invocation is
// retried, the function's Errors alarm fires) and emits no figures.
func TestAuditScanError(t *testing.T) {
	s := seed(t)
	s.table += "-missing"
	var r run
	if _, err := s.auditor(t, &r, audit.Config{}).Audit(t.Context(), s.now); err == nil {
		t.Fatal("Audit of a missing table succeeded")
	}
	if r.metrics.Len() != 0 {
		t.Errorf("metrics after a failed Scan:\n%s", r.metrics.String())
	}
}

// failingScanner is the table's DynamoDB client, its Scan failing from
// call failAt on (1 for the first).
type failingScanner struct {
	audit.Scanner
	calls, failAt int
}

func (f *failingScanner) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	f.calls++
	if f.calls >= f.failAt {
		return nil, errors.New("throttled")
	}
	return f.Scanner.Scan(ctx, in, opts...)
}

// TestAuditScanErrorAfterPages: a Scan that fails after a page was read
// fails the run (retried), having emitted what it counted, a lower bound,
// as abandoned_records and audit_incomplete 1, both stamped with the
// run's scheduled time; failing on the first page, it emits nothing.
func TestAuditScanErrorAfterPages(t *testing.T) {
	s := seed(t)
	at := time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC)
	for _, failAt := range []int{1, 2} {
		t.Run(fmt.Sprintf("page %d", failAt), func(t *testing.T) {
			var r run
			// The seeded table's auditor, its Scans failing from failAt on.
			cfg := audit.Config{
				DB: &failingScanner{Scanner: s.db, failAt: failAt}, TableName: s.table, Segments: 1, PageItems: 3,
				Logger:  slog.New(slog.NewJSONHandler(&r.logs, nil)),
				Metrics: metrics.New(&r.metrics, "once", map[string]string{"Service": "auditor"}),
				Now:     func() time.Time { return s.now },
			}
			a, err := audit.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := a.Audit(t.Context(), at)
			if err == nil {
				t.Fatal("Audit with a failing Scan succeeded")
			}
			if failAt == 1 {
				if r.metrics.Len() != 0 {
					t.Errorf("metrics after a Scan failing on the first page:\n%s", r.metrics.String())
				}
				return
			}
			if res.Pages != 1 || res.Complete {
				t.Errorf("Audit = %+v, want 1 page read, incomplete", res)
			}
			want := map[string][]float64{audit.MetricAbandoned: {float64(res.Stuck)}, audit.MetricIncomplete: {1}}
			if diff := cmp.Diff(want, r.figures(t)); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]int64{at.UnixMilli(), at.UnixMilli()}, r.stamps(t)); diff != "" {
				t.Errorf("metric timestamps (-want +got):\n%s", diff)
			}
			if !strings.Contains(r.logs.String(), `"stopped_by":"scan error`) {
				t.Errorf("no audit incomplete line stopped_by scan error in\n%s", r.logs.String())
			}
		})
	}
}

// TestHandle: the handler takes a scheduled event as Lambda decodes it,
// audits the segment of its time, and stamps its figures with that time.
func TestHandle(t *testing.T) {
	s := seed(t)
	at := time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC)
	raw := fmt.Sprintf(`{"version":"0","id":"cdc73f9d-aea9-11e3-9d5a-835b769c0d9c","detail-type":"Scheduled Event","source":"aws.events",
		"account":"123456789012","time":%q,"region":"us-east-1","resources":["arn:aws:events:us-east-1:123456789012:rule/once-AuditorFunctionAudit"],"detail":{}}`, at.Format(time.RFC3339))
	var ev events.EventBridgeEvent
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		t.Fatal(err)
	}
	var r run
	if err := s.auditor(t, &r, audit.Config{}).Handle(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	// 498778 hours since the epoch: segment 0 of 23 (it was 10 of 24).
	want := `"segment":0,"segments":23`
	if !strings.Contains(r.logs.String(), want) {
		t.Errorf("logs %s, want %s", r.logs.String(), want)
	}
	// What segment 0 of 23 holds, read the same way.
	res, err := s.auditor(t, &run{}, audit.Config{}).Audit(t.Context(), at)
	if err != nil {
		t.Fatal(err)
	}
	figures := map[string][]float64{audit.MetricAbandoned: {float64(res.Stuck)}, audit.MetricIncomplete: {0}}
	if diff := cmp.Diff(figures, r.figures(t)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{at.UnixMilli(), at.UnixMilli()}, r.stamps(t)); diff != "" {
		t.Errorf("metric timestamps (-want +got), want the event's time:\n%s", diff)
	}
}

// TestSegment: the segment is the hour since the epoch, modulo segments.
func TestSegment(t *testing.T) {
	tests := []struct {
		at       time.Time
		segments int
		want     int
	}{
		{time.Unix(0, 0), 24, 0},
		// Before 1970: the hour is floored, -1 for the last second of 1969
		// (truncation toward zero would make it hour 0).
		{time.Unix(-1, 0), 24, 23},
		{time.Unix(-3600, 0), 24, 23},
		{time.Unix(-3601, 0), 24, 22},
		{time.Unix(-1, 0), 23, 22},
		{time.Unix(5*3600+3599, 0), 24, 5},
		{time.Unix(24*3600, 0), 24, 0},
		{time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC), 24, 10},
		{time.Date(2026, 11, 25, 10, 59, 59, 0, time.FixedZone("X", 3600)), 24, 9},
		{time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC), 1, 0},
		// audit.Segments: 498778 hours since the epoch at 2026-11-25 10:00 UTC.
		{time.Unix(23*3600, 0), 23, 0},
		{time.Unix(24*3600, 0), 23, 1},
		{time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC), 23, 13},
		{time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC), 23, 0},
		{time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC), 23, 0},
		{time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC), 23, 1},
		{time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC), 7, int((time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC).Unix() / 3600) % 7)},
	}
	for _, tt := range tests {
		if got := audit.Segment(tt.at, tt.segments); got != tt.want {
			t.Errorf("Segment(%s, %d) = %d, want %d", tt.at, tt.segments, got, tt.want)
		}
	}
}
