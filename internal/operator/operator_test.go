package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/operator"
	"github.com/oncehq/once/internal/sqstest"
	"github.com/oncehq/once/internal/stream"
)

// env is one test's tables and queues, and the environment oncectl runs
// with.
type env struct {
	vars  map[string]string
	db    *dynamodb.Client
	store *dynamo.Store
	names dynamotest.Names
	sqs   *sqs.Client
	urls  map[string]string // by config variable
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := dynamotest.Client(t)
	names := dynamotest.Tables(t, db)
	// Records whose expiry has passed stay, as on AWS within minutes:
	// DynamoDB Local would delete them within seconds.
	if _, err := db.UpdateTimeToLive(t.Context(), &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(names.ByLogicalID["IdempotencyTable"]),
		TimeToLiveSpecification: &dynamodbtypes.TimeToLiveSpecification{AttributeName: aws.String(dynamo.AttrExpiresAt), Enabled: aws.Bool(false)},
	}); err != nil {
		t.Fatal(err)
	}
	endpoint := sqstest.Endpoint(t)
	c := sqstest.Client(t, endpoint)
	e := &env{
		vars:  names.Env(),
		db:    db,
		store: dynamo.New(db, names.ByLogicalID["IdempotencyTable"]), names: names, sqs: c, urls: map[string]string{},
	}
	e.vars[config.EnvDynamoDBEndpoint] = dynamotest.Endpoint(t)
	e.vars[config.EnvSQSEndpoint] = endpoint
	for env, name := range map[string]string{
		config.EnvCheckQueue: config.DefaultCheckQueue, config.EnvCheckDLQ: config.DefaultCheckDLQ,
		config.EnvWorkerRetryQueue: config.DefaultWorkerRetryQueue, config.EnvWorkerRetryDLQ: config.DefaultWorkerRetryDLQ,
		config.EnvReceiptRetryQueue: config.DefaultReceiptRetryQueue, config.EnvReceiptRetryDLQ: config.DefaultReceiptRetryDLQ,
	} {
		e.urls[env] = sqstest.Queue(t, c, name, nil)
	}
	return e
}

// run runs oncectl args and returns its exit code and output.
func (e *env) run(t *testing.T, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, eo bytes.Buffer
	code = operator.Run(t.Context(), args, func(k string) string { return e.vars[k] }, &o, &eo)
	return code, o.String(), eo.String()
}

// record writes a record of key with status, updated ago.
func (e *env) record(t *testing.T, tenant, raw string, status idempotency.Status, ago time.Duration) idempotency.Record {
	t.Helper()
	now := time.Now()
	rec := idempotency.Record{
		Key: idempotency.NewKey(tenant, raw), Status: status, Route: "POST /v1/charges", Fingerprint: "f00d",
		External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(time.Hour),
		Request:   []byte(`{"amount":1500,"currency":"usd","customer":"cus_42","source":"tok_visa"}`),
		CreatedAt: now.Add(-ago), UpdatedAt: now.Add(-ago),
	}
	if status == idempotency.StatusCompleted {
		rec.LeaseToken = ""
		rec.Response = &idempotency.Response{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"id":"ch_1"}`)}
	}
	if status == idempotency.StatusInProgress {
		rec.ExpiresAt = now.Add(-time.Second) // its lease has run out
	}
	if err := e.store.Reserve(t.Context(), rec, nil, now); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestUnknownOldestAcrossPages: -limit lists the oldest UNKNOWN records of
// the whole table, not of the first Scan pages. Six records of about 300 KB
// take more than one 1 MB page; the one the Scan reads last is made the
// oldest.
func TestUnknownOldestAcrossPages(t *testing.T) {
	e := newEnv(t)
	body := []byte(`{"note":"` + strings.Repeat("x", 300<<10) + `"}`)
	byID := map[string]idempotency.Record{}
	for i := range 6 {
		rec := e.record(t, "acme", fmt.Sprintf("big-%d", i), idempotency.StatusUnknown, time.Minute)
		rec.Request = body
		byID[rec.Key.ID()] = rec
		e.put(t, rec)
	}
	order, pages := e.scanOrder(t, "IdempotencyTable")
	if pages < 2 || len(order) != 6 {
		t.Fatalf("the table is %d records in %d Scan pages, want 6 in 2 or more", len(order), pages)
	}
	last := byID[order[len(order)-1]]
	last.CreatedAt = last.CreatedAt.Add(-time.Hour)
	last.UpdatedAt = last.UpdatedAt.Add(-time.Hour)
	e.put(t, last)
	code, out, errOut := e.run(t, "unknown", "-limit", "1", "-json")
	if code != 0 || !strings.Contains(out, last.Key.ID()) || strings.Count(out, "\n") != 1 {
		t.Errorf("unknown -limit 1 = exit %d %q (%s), want the oldest, %s, read last", code, out, errOut, last.Key.ID())
	}
}

// scanOrder returns the partition keys of the table logicalID in the order
// a Scan reads them, and the number of pages it took.
func (e *env) scanOrder(t *testing.T, logicalID string) (pks []string, pages int) {
	t.Helper()
	in := &dynamodb.ScanInput{TableName: aws.String(e.names.ByLogicalID[logicalID])}
	for {
		out, err := e.db.Scan(t.Context(), in)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, item := range out.Items {
			pks = append(pks, item["pk"].(*dynamodbtypes.AttributeValueMemberS).Value)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return pks, pages
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// put writes rec as it is.
func (e *env) put(t *testing.T, rec idempotency.Record) {
	t.Helper()
	if _, err := e.db.PutItem(t.Context(), &dynamodb.PutItemInput{
		TableName: aws.String(e.names.ByLogicalID["IdempotencyTable"]), Item: dynamo.ItemFromRecord(rec),
	}); err != nil {
		t.Fatal(err)
	}
}

func TestUnknown(t *testing.T) {
	e := newEnv(t)
	older := e.record(t, "acme", "order-7", idempotency.StatusUnknown, time.Hour)
	newer := e.record(t, "acme", "order-8", idempotency.StatusUnknown, time.Minute)
	other := e.record(t, "globex", "order-7", idempotency.StatusUnknown, 2*time.Minute)
	e.record(t, "acme", "order-9", idempotency.StatusCompleted, time.Minute)
	e.record(t, "acme", "order-10", idempotency.StatusInProgress, time.Minute)
	tests := []struct {
		args []string
		want []string // record IDs, in order
	}{
		{[]string{"unknown", "-json"}, []string{older.Key.ID(), other.Key.ID(), newer.Key.ID()}},
		{[]string{"unknown", "-json", "-tenant", "acme"}, []string{older.Key.ID(), newer.Key.ID()}},
		{[]string{"unknown", "-limit", "1", "-json"}, []string{older.Key.ID()}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := e.run(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var got []string
			for line := range strings.Lines(out) {
				var s struct {
					Record, Tenant, Route string
					Since                 time.Time `json:"unknown_since"`
				}
				if err := json.Unmarshal([]byte(line), &s); err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				got = append(got, s.Record)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
	code, out, errOut := e.run(t, "unknown")
	if code != 0 || !strings.Contains(out, "RECORD") || !strings.Contains(out, older.Key.ID()) {
		t.Errorf("table output = %d %q, want a header and the records", code, out)
	}
	if !strings.Contains(errOut, "3 UNKNOWN record(s)") || strings.Contains(errOut, "listed") {
		t.Errorf("unknown stderr = %q, want 3 UNKNOWN record(s), no cut", errOut)
	}
	// The counts are of what the Scan read, not of the -limit listed.
	code, out, errOut = e.run(t, "unknown", "-limit", "2")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(errOut, "3 UNKNOWN record(s)") ||
		!strings.Contains(errOut, "3 read, 2 listed (raise -limit)") {
		t.Errorf("unknown -limit 2 = %d %q %q, want 2 rows, 3 UNKNOWN record(s) and 3 read, 2 listed (raise -limit)", code, out, errOut)
	}
	if strings.Contains(out, "order-7") {
		t.Errorf("the output holds a raw key:\n%s", out)
	}
	// -json cuts as much, and says so on stderr: stdout stays JSON only.
	code, out, errOut = e.run(t, "unknown", "-json", "-limit", "2")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "3 UNKNOWN record(s)") ||
		!strings.Contains(errOut, "3 read, 2 listed (raise -limit)") {
		t.Errorf("unknown -json -limit 2 = %d %q %q, want 2 JSON lines, 3 UNKNOWN record(s) and 3 read, 2 listed (raise -limit)", code, out, errOut)
	}
	for line := range strings.Lines(out) {
		if !json.Valid([]byte(line)) {
			t.Errorf("unknown -json -limit 2: stdout line %q is not JSON", line)
		}
	}
}

// TestUnknownAgeAndLostCheck: unknown ages and sorts a record by its
// created_at, which a redrive (the checker's, once per retention, or a
// client's) keeps while it resets updated_at, falling back to updated_at
// when there is no created_at; and it marks lost the check of a record past
// its expiry by more than recovery.MaxDelay and the margin.
func TestUnknownAgeAndLostCheck(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	const day = 24 * time.Hour
	recs := []struct {
		raw              string
		created, updated time.Duration // ago; created 0: no created_at
		unknown          time.Duration // ago, Record.UnknownSince; 0: none
		expires          time.Duration // from now
		wantFrom         string
		wantAge          time.Duration
		wantLost         bool
	}{
		// Listed in this order, oldest first.
		{raw: "stuck-30d-redriven", created: 30 * day, updated: time.Hour, unknown: 29 * day, expires: day - time.Hour, wantFrom: "created_at", wantAge: 30 * day},
		{raw: "chain-lost", created: 3 * day, updated: 2 * day, expires: -day, wantFrom: "created_at", wantAge: 3 * day, wantLost: true},
		{raw: "no-created-at", updated: 5 * time.Hour, unknown: 4 * time.Hour, expires: day - 5*time.Hour, wantFrom: "updated_at", wantAge: 5 * time.Hour},
		{raw: "just-expired", created: 3 * time.Hour, updated: 3 * time.Hour, expires: -10 * time.Minute, wantFrom: "created_at", wantAge: 3 * time.Hour},
		{raw: "fresh", created: 2 * time.Hour, updated: 2 * time.Hour, expires: day - 2*time.Hour, wantFrom: "created_at", wantAge: 2 * time.Hour},
	}
	var want []string
	for _, r := range recs {
		rec := idempotency.Record{
			Key: idempotency.NewKey("acme", r.raw), Status: idempotency.StatusUnknown, Route: "POST /v1/charges", Fingerprint: "f00d",
			External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(r.expires), UpdatedAt: now.Add(-r.updated),
		}
		if r.created != 0 {
			rec.CreatedAt = now.Add(-r.created)
		}
		if r.unknown != 0 {
			rec.UnknownSince = now.Add(-r.unknown)
		}
		e.put(t, rec)
		want = append(want, rec.Key.ID())
	}
	type line struct {
		Record    string     `json:"record"`
		Since     time.Time  `json:"unknown_since"`
		SinceFrom string     `json:"unknown_since_from"`
		For       string     `json:"unknown_for"`
		WentAt    *time.Time `json:"went_unknown_at"`
		CreatedAt *time.Time `json:"created_at"`
		UpdatedAt *time.Time `json:"updated_at"`
		CheckLost bool       `json:"check_lost"`
	}
	code, out, errOut := e.run(t, "unknown", "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got []line
	for l := range strings.Lines(out) {
		var s line
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		got = append(got, s)
	}
	if diff := cmp.Diff(want, func() (ids []string) {
		for _, g := range got {
			ids = append(ids, g.Record)
		}
		return ids
	}()); diff != "" {
		t.Fatalf("records, oldest first (-want +got):\n%s", diff)
	}
	for i, r := range recs {
		t.Run(r.raw, func(t *testing.T) {
			g := got[i]
			age, err := time.ParseDuration(g.For)
			if err != nil || age < r.wantAge || age > r.wantAge+time.Minute {
				t.Errorf("unknown_for = %q (%v), want about %v", g.For, err, r.wantAge)
			}
			if g.SinceFrom != r.wantFrom || !g.Since.Equal(now.Add(-r.wantAge).Truncate(time.Millisecond)) {
				t.Errorf("unknown_since = %v from %q, want %v from %q", g.Since, g.SinceFrom, now.Add(-r.wantAge), r.wantFrom)
			}
			if wantAt := now.Add(-r.unknown).Truncate(time.Millisecond); (g.WentAt == nil) != (r.unknown == 0) || (g.WentAt != nil && !g.WentAt.Equal(wantAt)) {
				t.Errorf("went_unknown_at = %v, want %v iff the record has UnknownSince (%v ago)", g.WentAt, wantAt, r.unknown)
			}
			if g.UpdatedAt == nil || (g.CreatedAt == nil) != (r.created == 0) {
				t.Errorf("created_at %v, updated_at %v: want updated_at, and created_at iff the record has one", g.CreatedAt, g.UpdatedAt)
			}
			if g.CheckLost != r.wantLost {
				t.Errorf("check_lost = %v, want %v", g.CheckLost, r.wantLost)
			}
		})
	}
	code, out, errOut = e.run(t, "unknown", "-limit", "1", "-json")
	if code != 0 || !strings.Contains(out, want[0]) || strings.Count(out, "\n") != 1 {
		t.Errorf("unknown -limit 1 = exit %d %q (%s), want the oldest by created_at, %s", code, out, errOut, want[0])
	}
	code, out, errOut = e.run(t, "unknown")
	if code != 0 || strings.Count(out, " lost ") != 1 || !strings.Contains(errOut, "1 past their expiry") || !strings.Contains(errOut, "reannounce") {
		t.Errorf("table = exit %d %q %q, want one lost check, and reannounce named", code, out, errOut)
	}
}

func TestShow(t *testing.T) {
	e := newEnv(t)
	done := e.record(t, "acme", "order-9", idempotency.StatusCompleted, time.Minute)
	for _, args := range [][]string{
		{"show", done.Key.ID()},
		{"show", "-tenant", "acme", "-key", "order-9"},
		{"show", "-bodies", done.Key.ID()},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := e.run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("output %q: %v", out, err)
			}
			want := map[string]any{
				"record": done.Key.ID(), "tenant": "acme", "key_hash": done.Key.Hash, "status": "COMPLETED",
				"route": "POST /v1/charges", "external": true, "forward_key": done.ForwardKey(),
			}
			for k, w := range want {
				if v[k] != w {
					t.Errorf("%s = %v, want %v", k, v[k], w)
				}
			}
			resp, _ := v["response"].(map[string]any)
			if resp["status"] != float64(201) || resp["body_bytes"] != float64(len(done.Response.Body)) {
				t.Errorf("response = %v, want 201 with its size", resp)
			}
			bodies := args[1] == "-bodies"
			if _, ok := v["request"]; ok != bodies {
				t.Errorf("request shown: %v, want %v", ok, bodies)
			}
			if _, ok := resp["body"]; ok != bodies {
				t.Errorf("response body shown: %v, want %v", ok, bodies)
			}
			if strings.Contains(out, "order-9") {
				t.Errorf("the output holds the raw key:\n%s", out)
			}
		})
	}
	// An UNKNOWN record shows when it went UNKNOWN (the reconciler's settle
	// wait runs from it); a COMPLETED one has none.
	reserved := e.record(t, "acme", "order-11", idempotency.StatusInProgress, time.Minute)
	marked := time.Now().Truncate(time.Millisecond)
	if err := e.store.MarkUnknown(t.Context(), reserved.Key, reserved.LeaseToken, idempotency.NewToken(), marked.Add(time.Hour), marked); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id   string
		want string
	}{
		{reserved.Key.ID(), marked.UTC().Format(time.RFC3339Nano)},
		{done.Key.ID(), ""},
	} {
		code, out, errOut := e.run(t, "show", tt.id)
		if code != 0 {
			t.Fatalf("show %s: exit %d: %s", tt.id, code, errOut)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		if got, _ := v["unknown_since"].(string); got != tt.want {
			t.Errorf("show %s: unknown_since = %q, want %q", tt.id, got, tt.want)
		}
	}
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"show", "acme#" + strings.Repeat("0", 64)}, 1},
		{[]string{"show", "not-an-id"}, 2},
		{[]string{"show", "-tenant", "acme"}, 2},
		{[]string{"show"}, 2},
		{[]string{"frobnicate"}, 2},
	} {
		if code, _, _ := e.run(t, tt.args...); code != tt.code {
			t.Errorf("oncectl %v = exit %d, want %d", tt.args, code, tt.code)
		}
	}
}

// TestReannounce re-announces a record and watches the idempotency table's
// stream for the MODIFY the reconciler is triggered by.
func TestReannounce(t *testing.T) {
	e := newEnv(t)
	unknown := e.record(t, "acme", "order-7", idempotency.StatusUnknown, time.Hour)
	abandoned := e.record(t, "acme", "order-10", idempotency.StatusInProgress, time.Minute)
	done := e.record(t, "acme", "order-9", idempotency.StatusCompleted, time.Minute)

	var (
		mu   sync.Mutex
		seen []events.DynamoDBEventRecord
	)
	p, err := stream.NewPoller(stream.PollerOptions{
		Client: dynamotest.Streams(t), DB: dynamotest.Client(t), Table: e.names.ByLogicalID["IdempotencyTable"], PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
		Handler: func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, ev.Records...)
			return events.DynamoDBEventResponse{}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	lambdatest.Start(t, p)

	for _, rec := range []idempotency.Record{unknown, abandoned} {
		code, out, errOut := e.run(t, "reannounce", rec.Key.ID())
		if code != 0 || !strings.Contains(out, "re-announced") {
			t.Fatalf("reannounce %s = exit %d %q %q", rec.Key.Short(), code, out, errOut)
		}
		got, err := e.store.Get(t.Context(), rec.Key)
		if err != nil || got.Status != idempotency.StatusUnknown || got.LeaseToken == rec.LeaseToken {
			t.Errorf("after reannounce: %s under %q, %v; want UNKNOWN under a new lease token", got.Status, got.LeaseToken, err)
		}
		lambdatest.WaitFor(t, 10*time.Second, "the MODIFY to UNKNOWN on the stream", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range seen {
				img, _ := dynamo.RecordFromStreamImage(r.Change.NewImage)
				if r.EventName == "MODIFY" && img.Key == rec.Key && img.Status == idempotency.StatusUnknown && img.LeaseToken == got.LeaseToken {
					return true
				}
			}
			return false
		})
	}
	code, _, errOut := e.run(t, "reannounce", done.Key.ID())
	if code != 1 || !strings.Contains(errOut, "COMPLETED") {
		t.Errorf("reannounce of a COMPLETED record = exit %d %q, want 1 saying it is COMPLETED", code, errOut)
	}
	if got, _ := e.store.Get(t.Context(), done.Key); got.Status != idempotency.StatusCompleted {
		t.Errorf("the COMPLETED record became %s", got.Status)
	}
}

// TestReannounceExtendsExpiry: a re-announced UNKNOWN record's expiry is a
// full retention from the re-announcement, as the checker gives one when an
// External lease runs out; a later expiry is kept. It has no TTL attribute
// afterwards, whatever it had (here an item written before UNKNOWN records
// lost theirs, carrying one): TTL never deletes an UNKNOWN record.
func TestReannounceExtendsExpiry(t *testing.T) {
	e := newEnv(t)
	table := e.names.ByLogicalID["IdempotencyTable"]
	for _, tc := range []struct {
		name      string
		expiresIn time.Duration // from now, when re-announced
		extended  bool
	}{
		{"expired", -time.Minute, true},
		{"about to expire", time.Minute, true},
		{"kept longer than a retention", config.DefaultRetention + time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			rec := idempotency.Record{
				Key: idempotency.NewKey("acme", "reannounce-"+tc.name), Status: idempotency.StatusUnknown, Route: "POST /v1/charges",
				Fingerprint: "f00d", External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(tc.expiresIn),
				Request:   []byte(`{"amount":1500,"currency":"usd","customer":"cus_42","source":"tok_visa"}`),
				CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour),
			}
			if err := e.store.Reserve(t.Context(), rec, nil, now.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
			if _, err := e.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{ // a legacy item's TTL, far ahead
				TableName: aws.String(table), Key: map[string]dynamodbtypes.AttributeValue{dynamo.AttrPK: &dynamodbtypes.AttributeValueMemberS{Value: rec.Key.ID()}},
				UpdateExpression:          aws.String("SET #ttl = :ttl"),
				ExpressionAttributeNames:  map[string]string{"#ttl": dynamo.AttrExpiresAt},
				ExpressionAttributeValues: map[string]dynamodbtypes.AttributeValue{":ttl": &dynamodbtypes.AttributeValueMemberN{Value: fmt.Sprint(now.Add(48 * time.Hour).Unix())}},
			}); err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			if code, out, errOut := e.run(t, "reannounce", rec.Key.ID()); code != 0 || !strings.Contains(out, "re-announced") {
				t.Fatalf("reannounce = exit %d %q %q", code, out, errOut)
			}
			after := time.Now()
			got, err := e.store.Get(t.Context(), rec.Key)
			if err != nil || got.Status != idempotency.StatusUnknown || got.LeaseToken == rec.LeaseToken {
				t.Fatalf("after reannounce: %s under %q, %v; want UNKNOWN under a new lease token", got.Status, got.LeaseToken, err)
			}
			lo, hi := before.Add(config.DefaultRetention).Truncate(time.Millisecond), after.Add(config.DefaultRetention)
			if !tc.extended {
				lo, hi = rec.ExpiresAt.Truncate(time.Millisecond), rec.ExpiresAt
			}
			if got.ExpiresAt.Before(lo) || got.ExpiresAt.After(hi) {
				t.Errorf("expiry = %v, want %v to %v", got.ExpiresAt, lo, hi)
			}
			out, err := e.db.GetItem(t.Context(), &dynamodb.GetItemInput{
				TableName: aws.String(table), Key: map[string]dynamodbtypes.AttributeValue{dynamo.AttrPK: &dynamodbtypes.AttributeValueMemberS{Value: rec.Key.ID()}},
				ConsistentRead: aws.Bool(true),
			})
			if err != nil {
				t.Fatal(err)
			}
			if ttl, ok := out.Item[dynamo.AttrExpiresAt]; ok {
				t.Errorf("TTL attribute %s = %v after reannounce, want none", dynamo.AttrExpiresAt, ttl)
			}
			// A new request with the key finds it held, not free.
			again := rec
			again.Status, again.LeaseToken, again.ExpiresAt = idempotency.StatusInProgress, idempotency.NewToken(), after.Add(time.Minute)
			var conflict *idempotency.ConflictError
			if err := e.store.Reserve(t.Context(), again, nil, after); !errors.As(err, &conflict) {
				t.Errorf("Reserve of the key after reannounce = %v, want a *idempotency.ConflictError", err)
			}
		})
	}
}

func TestDeadLetters(t *testing.T) {
	e := newEnv(t)
	send := func(url, body string) {
		if _, err := e.sqs.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	checkDLQ, retryDLQ := e.urls[config.EnvCheckDLQ], e.urls[config.EnvWorkerRetryDLQ]
	send(checkDLQ, `{"record":"acme#1","lease_token":"a"}`)
	send(checkDLQ, `{"record":"acme#2","lease_token":"b"}`)
	send(retryDLQ, `{"tenant":"acme","payment":"pay_x","attempt":5}`)
	receipt := `{"tenant":"acme","job":"rcpt_aaaaaaaaaaaaaaaaaaaaaaaa","attempt":30,"gave_up":"2026-11-01T09:00:00Z"}`
	send(e.urls[config.EnvReceiptRetryDLQ], receipt)

	type letter struct {
		Queue string `json:"queue"`
		ID    string `json:"message_id"`
		Body  string `json:"body"`
	}
	list := func(args ...string) []letter {
		t.Helper()
		code, out, errOut := e.run(t, append([]string{"dlq", "list", "-json"}, args...)...)
		if code != 0 {
			t.Fatalf("dlq list = exit %d: %s", code, errOut)
		}
		var ls []letter
		for line := range strings.Lines(out) {
			var l letter
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		return ls
	}
	all := list()
	if len(all) != 4 {
		t.Fatalf("dlq list = %+v, want 4 letters", all)
	}
	// A listing leaves the letters in place, visible.
	if again := list("check"); len(again) != 2 || again[0].Queue != "check" {
		t.Fatalf("dlq list check = %+v, want the 2 check letters", again)
	}
	var first letter
	for _, l := range all {
		if l.Body == `{"record":"acme#1","lease_token":"a"}` {
			first = l
		}
	}
	code, out, errOut := e.run(t, "dlq", "redrive", "check", first.ID)
	if code != 0 || !strings.Contains(out, first.ID) {
		t.Fatalf("dlq redrive = exit %d %q %q", code, out, errOut)
	}
	back := sqstest.Receive(t, e.sqs, e.urls[config.EnvCheckQueue], 0, false)
	if len(back) != 1 || aws.ToString(back[0].Body) != first.Body {
		t.Errorf("check queue = %v, want the redriven letter", back)
	}
	if left := list("check"); len(left) != 1 || left[0].ID == first.ID {
		t.Errorf("check dead letters after the redrive = %+v, want the other one", left)
	}
	if code, _, errOut := e.run(t, "dlq", "redrive", "check", "no-such-message"); code != 1 || !strings.Contains(errOut, "no-such-message") {
		t.Errorf("redrive of an unknown letter = exit %d %q, want 1 naming it", code, errOut)
	}
	if code, _, _ := e.run(t, "dlq", "redrive", "worker-retry", "-all"); code != 0 {
		t.Errorf("redrive -all = exit %d", code)
	}
	if left := list("worker-retry"); len(left) != 0 {
		t.Errorf("worker-retry dead letters after -all = %+v, want none", left)
	}
	if back := sqstest.Receive(t, e.sqs, e.urls[config.EnvWorkerRetryQueue], 0, false); len(back) != 1 {
		t.Errorf("worker retry queue = %v, want the redriven letter", back)
	}
	if l := list("receipt-retry"); len(l) != 1 || l[0].Body != receipt {
		t.Fatalf("dlq list receipt-retry = %+v, want the receipt given up on", l)
	}
	if code, _, errOut := e.run(t, "dlq", "redrive", "receipt-retry", "-all"); code != 0 {
		t.Errorf("redrive receipt-retry -all = exit %d %q", code, errOut)
	}
	if back := sqstest.Receive(t, e.sqs, e.urls[config.EnvReceiptRetryQueue], 0, false); len(back) != 1 || aws.ToString(back[0].Body) != receipt {
		t.Errorf("receipt retry queue = %v, want the redriven letter", back)
	}
	for _, args := range [][]string{{"dlq"}, {"dlq", "list", "nope"}, {"dlq", "redrive", "check"}, {"dlq", "redrive", "check", "-all", "x"}, {"dlq", "redrive", "receipts"}} {
		if code, _, _ := e.run(t, args...); code != 2 {
			t.Errorf("oncectl %v = exit %d, want 2", args, code)
		}
	}
}

// TestRunBadEnvironment: every problem of the environment, the table's name
// included, is reported at once, with exit status 2.
func TestRunBadEnvironment(t *testing.T) {
	env := map[string]string{"ONCE_IDEMPOTENCY_TABLE": "a b", "ONCE_LEASE": "forever"}
	var out, errOut bytes.Buffer
	code := operator.Run(t.Context(), []string{"unknown"}, func(k string) string { return env[k] }, &out, &errOut)
	if code != 2 {
		t.Errorf("Run = exit %d, want 2", code)
	}
	for _, want := range []string{"ONCE_IDEMPOTENCY_TABLE", "ONCE_LEASE"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("Run error %q does not name %s", errOut.String(), want)
		}
	}
}

// TestDeadLettersScanOutlastingItsHold: a scan that takes longer than it
// hides what it received (on AWS, a dead-letter queue of thousands of
// messages read 10 at a time; here a hold of one second and the scan's
// one-second long poll) receives the first letters again. Each is still
// listed once and sent back once, and the scan stops instead of cycling
// through the same letters until its bound of 10,000 receives.
func TestDeadLettersScanOutlastingItsHold(t *testing.T) {
	operator.SetHoldFor(t, 1)
	e := newEnv(t)
	dlq, source := e.urls[config.EnvWorkerRetryDLQ], e.urls[config.EnvWorkerRetryQueue]
	bodies := map[string]bool{}
	for i := range 3 {
		body := fmt.Sprintf(`{"tenant":"acme","payment":"pay_%024d","attempt":5}`, i)
		bodies[body] = true
		if _, err := e.sqs.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		var o, eo bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		code := operator.Run(ctx, args, func(k string) string { return e.vars[k] }, &o, &eo)
		return code, o.String(), eo.String()
	}
	code, out, errOut := run("dlq", "list", "-json", "-limit", "5", "worker-retry")
	if code != 0 {
		t.Fatalf("dlq list = exit %d: %s", code, errOut)
	}
	listed := map[string]int{}
	for line := range strings.Lines(out) {
		var l struct {
			ID string `json:"message_id"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		listed[l.ID]++
	}
	if len(listed) != 3 {
		t.Errorf("dlq list = %d letters %v, want the 3 letters", len(listed), listed)
	}
	for id, n := range listed {
		if n != 1 {
			t.Errorf("dlq list lists letter %s %d times, want once", id, n)
		}
	}
	time.Sleep(1100 * time.Millisecond) // the listing's hold runs out
	if code, _, errOut := run("dlq", "redrive", "worker-retry", "-all"); code != 0 {
		t.Fatalf("dlq redrive -all = exit %d: %s", code, errOut)
	}
	got := map[string]int{}
	for {
		msgs := sqstest.Receive(t, e.sqs, source, time.Second, false)
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			got[aws.ToString(m.Body)]++
		}
	}
	want := map[string]int{}
	for b := range bodies {
		want[b] = 1
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("messages sent back to the retry queue (-want +got):\n%s", diff)
	}
	time.Sleep(1100 * time.Millisecond)
	if left := sqstest.Receive(t, e.sqs, dlq, 0, true); len(left) != 0 {
		t.Errorf("dead letters left after redrive -all = %d, want none", len(left))
	}
}

// TestFlagErrors: a flag a command does not know, or one missing its
// value, is a usage error of every command (exit 2, the error and the
// command's usage printed once); -h is its help (exit 0). Nothing is read:
// no tables, no queues.
func TestFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		says string
	}{
		{[]string{"unknown", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"show", "-tenant"}, 2, "flag needs an argument: -tenant"},
		{[]string{"reannounce", "acme#x", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"forget", "-confirm"}, 2, "flag needs an argument: -confirm"},
		{[]string{"dlq", "list", "-limit", "many"}, 2, "invalid value"},
		{[]string{"pending", "-older-than", "soon"}, 2, "invalid value"},
		{[]string{"requeue-payment", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"holds", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"settle-hold", "-hold"}, 2, "flag needs an argument: -hold"},
		{[]string{"settle-order", "-bogus", "acme#x"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"settle-order", "-charged", "ch_1", "-confirm"}, 2, "flag needs an argument: -confirm"},
		{[]string{"settle-order", "-h"}, 0, "usage: oncectl settle-order"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := operator.New(config.Config{}, nil, nil, &out, &errOut).Run(t.Context(), tt.args)
			if code != tt.code || !strings.Contains(errOut.String(), tt.says) || strings.Count(errOut.String(), "usage: oncectl") != 1 {
				t.Errorf("oncectl %v = exit %d %q, want %d saying %q and the usage once", tt.args, code, errOut.String(), tt.code, tt.says)
			}
		})
	}
}
