package deploytest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/samtemplate"
)

// designTrigger is a stream trigger of docs/design.md ("Stream triggers").
type designTrigger struct {
	table    string
	patterns []string
}

var (
	triggerLine    = regexp.MustCompile("(?m)^\\s*- (\\w+), (\\w+) stream: (`\\{.*\\}`)")
	triggerPattern = regexp.MustCompile("`(\\{[^`]*\\})`")
)

// designTriggers reads the stream triggers from docs/design.md, by function
// logical ID.
func designTriggers(t *testing.T) map[string]designTrigger {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]designTrigger{}
	for _, m := range triggerLine.FindAllStringSubmatch(string(data), -1) {
		tr := designTrigger{table: m[2]}
		for _, p := range triggerPattern.FindAllStringSubmatch(m[3], -1) {
			tr.patterns = append(tr.patterns, p[1])
		}
		out[samtemplate.FunctionLogicalID(m[1])] = tr
	}
	if len(out) == 0 {
		t.Fatal(`docs/design.md: found no stream triggers ("- <function>, <Table> stream: ` + "`{...}`" + `")`)
	}
	return out
}

// streamEvent returns fn's single DynamoDB event.
func streamEvent(t *testing.T, id string) samtemplate.Event {
	t.Helper()
	var out []samtemplate.Event
	for _, ev := range template(t).Functions()[id].Events() {
		if ev.Type == "DynamoDB" {
			out = append(out, ev)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%s has %d DynamoDB events, want 1", id, len(out))
	}
	return out[0]
}

func TestStreamMappings(t *testing.T) {
	triggers := designTriggers(t)
	var withStreams []string
	for id, fn := range template(t).Functions() {
		for _, ev := range fn.Events() {
			if ev.Type == "DynamoDB" {
				withStreams = append(withStreams, id)
			}
		}
	}
	if diff := cmp.Diff(sortedKeys(triggers), sortedSlice(withStreams)); diff != "" {
		t.Errorf("stream-triggered functions mismatch (-design +template):\n%s", diff)
	}
	for id, want := range triggers {
		ev := streamEvent(t, id)
		p := ev.Properties
		wantStream := map[string]any{"Fn::GetAtt": []any{want.table, "StreamArn"}}
		if diff := cmp.Diff(wantStream, p["Stream"]); diff != "" {
			t.Errorf("%s Stream mismatch (-want +got):\n%s", id, diff)
		}
		patterns, err := ev.FilterPatterns()
		if err != nil {
			t.Fatal(err)
		}
		same := len(patterns) == len(want.patterns)
		for i := 0; same && i < len(patterns); i++ {
			same = jsonEqual(t, patterns[i], want.patterns[i])
		}
		if !same {
			t.Errorf("%s FilterCriteria = %q, want docs/design.md's %q", id, patterns, want.patterns)
		}
		if p["StartingPosition"] != "TRIM_HORIZON" {
			t.Errorf("%s StartingPosition = %v, want TRIM_HORIZON", id, p["StartingPosition"])
		}
		if diff := cmp.Diff([]any{"ReportBatchItemFailures"}, p["FunctionResponseTypes"]); diff != "" {
			t.Errorf("%s FunctionResponseTypes mismatch (-want +got):\n%s", id, diff)
		}
		if p["BisectBatchOnFunctionError"] != true {
			t.Errorf("%s BisectBatchOnFunctionError = %v, want true", id, p["BisectBatchOnFunctionError"])
		}
		if n, ok := p["BatchSize"].(int); !ok || n < 1 || n > 10000 {
			t.Errorf("%s BatchSize = %v, want 1-10000", id, p["BatchSize"])
		}
		// Bounded: Lambda's -1 (the default) retries a poison record until it
		// leaves the stream, blocking its shard for up to 24 hours.
		if n, ok := p["MaximumRetryAttempts"].(int); !ok || n < 0 || n > 10000 {
			t.Errorf("%s MaximumRetryAttempts = %v, want 0-10000", id, p["MaximumRetryAttempts"])
		}
		if n, ok := p["MaximumRecordAgeInSeconds"].(int); !ok || n < 60 || n > 604800 {
			t.Errorf("%s MaximumRecordAgeInSeconds = %v, want 60-604800", id, p["MaximumRecordAgeInSeconds"])
		}
		// A record of the idempotency table lives at least
		// config.MinRetention once UNKNOWN: no change of it may be retried
		// after that (the record could be gone, or reclaimed by a retry).
		if n, ok := p["MaximumRecordAgeInSeconds"].(int); ok && want.table == "IdempotencyTable" && time.Duration(n)*time.Second > config.MinRetention {
			t.Errorf("%s MaximumRecordAgeInSeconds = %d, want at most config.MinRetention (%v)", id, n, config.MinRetention)
		}
		onFailure := mapOf(mapOf(p["DestinationConfig"])["OnFailure"])
		dlq := samtemplate.FunctionFolder(id)
		dlq = string(dlq[0]-'a'+'A') + dlq[1:] + "DLQ"
		wantFailure := map[string]any{"Type": "SQS", "Destination": map[string]any{"Fn::GetAtt": []any{dlq, "Arn"}}}
		if diff := cmp.Diff(wantFailure, onFailure); diff != "" {
			t.Errorf("%s DestinationConfig.OnFailure mismatch (-want +got):\n%s", id, diff)
		}
		q := template(t).Resources()[dlq]
		if q.Type != "AWS::SQS::Queue" {
			t.Errorf("%s: %s is %q, want AWS::SQS::Queue", id, dlq, q.Type)
		}
		if q.Properties["SqsManagedSseEnabled"] != true && q.Properties["KmsMasterKeyId"] == nil {
			t.Errorf("%s is not encrypted (SqsManagedSseEnabled or KmsMasterKeyId)", dlq)
		}
		if got := q.Properties["MessageRetentionPeriod"]; got != 1209600 {
			t.Errorf("%s MessageRetentionPeriod = %v, want 1209600 (14 days)", dlq, got)
		}
	}
}

// TestStreamTimeoutBudget checks that a batch of provider calls, made one
// record after another, fits in the timeout of each function that calls the
// provider (the ones given ONCE_PROVIDER_URL; ONCE_PROVIDER_TIMEOUT alone
// may be there only for config.FromEnv's checks).
func TestStreamTimeoutBudget(t *testing.T) {
	defaults := template(t).ParameterDefaults()
	callTimeout, err := time.ParseDuration(defaults["ProviderTimeout"])
	if err != nil {
		t.Fatal(err)
	}
	for id, fn := range template(t).Functions() {
		if fn.Environment()["ONCE_PROVIDER_URL"] == nil {
			continue
		}
		timeout := time.Duration(fn.Properties["Timeout"].(int)) * time.Second
		batch := 1
		for _, ev := range fn.Events() {
			if n, ok := ev.Properties["BatchSize"].(int); ok && ev.Type == "DynamoDB" {
				batch = n
			}
		}
		if time.Duration(batch)*callTimeout >= timeout {
			t.Errorf("%s: BatchSize %d x ProviderTimeout %v >= Timeout %v", id, batch, callTimeout, timeout)
		}
	}
}

func TestStreamFilters(t *testing.T) {
	type rec struct {
		name string
		json []byte
		want map[string]bool // function -> delivered
	}
	pay := func(status string) map[string]events.DynamoDBAttributeValue { return paymentImage(status) }
	idem := func(status string) map[string]events.DynamoDBAttributeValue { return recordImage(status) }
	ttl := &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"}
	payments := []rec{
		{"INSERT pending payment", streamRecord("INSERT", nil, pay("pending"), nil), map[string]bool{"WorkerFunction": true}},
		{"INSERT succeeded payment", streamRecord("INSERT", nil, pay("succeeded"), nil), nil},
		{"MODIFY pending -> succeeded", streamRecord("MODIFY", pay("pending"), pay("succeeded"), nil), nil},
		{"MODIFY pending -> failed", streamRecord("MODIFY", pay("pending"), pay("failed"), nil), nil},
		{"MODIFY pending -> pending", streamRecord("MODIFY", pay("pending"), pay("pending"), nil), nil},
		{"REMOVE pending payment", streamRecord("REMOVE", pay("pending"), nil, nil), nil},
	}
	records := []rec{
		{"REMOVE IN_PROGRESS by TTL", streamRecord("REMOVE", idem("IN_PROGRESS"), nil, ttl), map[string]bool{"SweeperFunction": true}},
		{"REMOVE IN_PROGRESS without userIdentity (LocalStack TTL, release)", streamRecord("REMOVE", idem("IN_PROGRESS"), nil, nil), map[string]bool{"SweeperFunction": true}},
		{"REMOVE COMPLETED by TTL", streamRecord("REMOVE", idem("COMPLETED"), nil, ttl), nil},
		{"REMOVE UNKNOWN by TTL (unresolved: restored)", streamRecord("REMOVE", idem("UNKNOWN"), nil, ttl), map[string]bool{"SweeperFunction": true}},
		{"REMOVE UNKNOWN without userIdentity (the reconciler's release)", streamRecord("REMOVE", idem("UNKNOWN"), nil, nil), nil},
		{"INSERT IN_PROGRESS (a reservation: its check is scheduled)", streamRecord("INSERT", nil, idem("IN_PROGRESS"), nil), map[string]bool{"SweeperFunction": true}},
		{"INSERT COMPLETED", streamRecord("INSERT", nil, idem("COMPLETED"), nil), nil},
		{"INSERT UNKNOWN (re-created by the sweeper: reconciled, its check scheduled)", streamRecord("INSERT", nil, idem("UNKNOWN"), nil), map[string]bool{"ReconcilerFunction": true, "SweeperFunction": true}},
		{"MODIFY IN_PROGRESS -> UNKNOWN (reconciled, its check scheduled)", streamRecord("MODIFY", idem("IN_PROGRESS"), idem("UNKNOWN"), nil), map[string]bool{"ReconcilerFunction": true, "SweeperFunction": true}},
		{"MODIFY UNKNOWN -> UNKNOWN (redriven: reconciled, its check scheduled)", streamRecord("MODIFY", idem("UNKNOWN"), idem("UNKNOWN"), nil), map[string]bool{"ReconcilerFunction": true, "SweeperFunction": true}},
		{"MODIFY IN_PROGRESS -> COMPLETED", streamRecord("MODIFY", idem("IN_PROGRESS"), idem("COMPLETED"), nil), nil},
		{"MODIFY UNKNOWN -> COMPLETED", streamRecord("MODIFY", idem("UNKNOWN"), idem("COMPLETED"), nil), nil},
		{"MODIFY COMPLETED -> IN_PROGRESS (reclaimed key)", streamRecord("MODIFY", idem("COMPLETED"), idem("IN_PROGRESS"), nil), map[string]bool{"SweeperFunction": true}},
		{"MODIFY IN_PROGRESS -> IN_PROGRESS", streamRecord("MODIFY", idem("IN_PROGRESS"), idem("IN_PROGRESS"), nil), map[string]bool{"SweeperFunction": true}},
	}
	job := func(state string) map[string]events.DynamoDBAttributeValue { return jobImage(state) }
	outbox := []rec{
		{"INSERT queued receipt job", streamRecord("INSERT", nil, job("queued"), nil), map[string]bool{"ReceiptsFunction": true}},
		{"MODIFY queued -> sending (claim)", streamRecord("MODIFY", job("queued"), job("sending"), nil), nil},
		{"MODIFY sending -> sent", streamRecord("MODIFY", job("sending"), job("sent"), nil), nil},
		{"MODIFY sending -> failed", streamRecord("MODIFY", job("sending"), job("failed"), nil), nil},
		{"REMOVE sent job by TTL", streamRecord("REMOVE", job("sent"), nil, ttl), nil},
		{"INSERT of another kind", streamRecord("INSERT", nil, map[string]events.DynamoDBAttributeValue{
			"pk": events.NewStringAttribute("acme#x"), "kind": events.NewStringAttribute("invoice")}, nil), nil},
	}
	byTable := map[string][]rec{"PaymentsTable": payments, "IdempotencyTable": records, "OutboxTable": outbox}
	for id, trig := range designTriggers(t) {
		patterns, err := streamEvent(t, id).FilterPatterns()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range byTable[trig.table] {
			got, err := samtemplate.MatchFilters(patterns, r.json)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if got != r.want[id] {
				t.Errorf("%s on %s: delivered = %v, want %v", id, r.name, got, r.want[id])
			}
		}
	}
}

var seq int

// streamRecord returns a DynamoDB stream record as Lambda sends it to a
// function (and matches it against FilterCriteria).
func streamRecord(name string, old, new map[string]events.DynamoDBAttributeValue, who *events.DynamoDBUserIdentity) []byte {
	seq++
	img := new
	if img == nil {
		img = old
	}
	rec := events.DynamoDBEventRecord{
		AWSRegion:      "us-east-1",
		EventID:        fmt.Sprintf("c81e728d9d4c2f636f067f89cc14862%d", seq),
		EventName:      name,
		EventSource:    "aws:dynamodb",
		EventVersion:   "1.1",
		EventSourceArn: "arn:aws:dynamodb:us-east-1:123456789012:table/once-x/stream/2026-01-01T00:00:00.000",
		Change: events.DynamoDBStreamRecord{
			ApproximateCreationDateTime: events.SecondsEpochTime{Time: time.Unix(1767225600, 0)},
			Keys:                        map[string]events.DynamoDBAttributeValue{"pk": img["pk"]},
			OldImage:                    old,
			NewImage:                    new,
			SequenceNumber:              fmt.Sprintf("1000000000000000000%04d", seq),
			SizeBytes:                   300,
			StreamViewType:              "NEW_AND_OLD_IMAGES",
		},
		UserIdentity: who,
	}
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err)
	}
	return b
}

func paymentImage(status string) map[string]events.DynamoDBAttributeValue {
	return map[string]events.DynamoDBAttributeValue{
		"pk":       events.NewStringAttribute("acme#pay_0123456789abcdefghijklmn"),
		"id":       events.NewStringAttribute("pay_0123456789abcdefghijklmn"),
		"tenant":   events.NewStringAttribute("acme"),
		"amount":   events.NewNumberAttribute("2500"),
		"currency": events.NewStringAttribute("eur"),
		"customer": events.NewStringAttribute("cus_42"),
		"source":   events.NewStringAttribute("tok_visa"),
		"status":   events.NewStringAttribute(status),
		"created":  events.NewNumberAttribute("1767225600"),
	}
}

func jobImage(state string) map[string]events.DynamoDBAttributeValue {
	return map[string]events.DynamoDBAttributeValue{
		"pk":       events.NewStringAttribute("acme#rcpt_abcdefghijklmnopqrstuvwx"),
		"kind":     events.NewStringAttribute("receipt"),
		"id":       events.NewStringAttribute("rcpt_abcdefghijklmnopqrstuvwx"),
		"tenant":   events.NewStringAttribute("acme"),
		"order":    events.NewStringAttribute("ord_abcdefghijklmnopqrstuvwx"),
		"order_pk": events.NewStringAttribute("acme#ord_abcdefghijklmnopqrstuvwx"),
		"to":       events.NewStringAttribute("ada@example.com"),
		"subject":  events.NewStringAttribute("Your receipt"),
		"text":     events.NewStringAttribute("Thank you."),
		"created":  events.NewNumberAttribute("1767225600"),
		"state":    events.NewStringAttribute(state),
		"attempts": events.NewNumberAttribute("0"),
	}
}

func recordImage(status string) map[string]events.DynamoDBAttributeValue {
	img := map[string]events.DynamoDBAttributeValue{
		"pk":            events.NewStringAttribute("acme#2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"),
		"tenant":        events.NewStringAttribute("acme"),
		"status":        events.NewStringAttribute(status),
		"route":         events.NewStringAttribute("POST /v1/charges"),
		"fingerprint":   events.NewStringAttribute("9f86d081884c7d659a2feaa0c55ad015"),
		"external":      events.NewBooleanAttribute(true),
		"expires_at":    events.NewNumberAttribute("1767225630"),
		"expires_at_ms": events.NewNumberAttribute("1767225630000"),
		"created_at":    events.NewNumberAttribute("1767225600000"),
	}
	if status != "COMPLETED" {
		img["lease_token"] = events.NewStringAttribute("lt_1")
	}
	return img
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Errorf("%s: %v", a, err)
		return false
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Errorf("%s: %v", b, err)
		return false
	}
	return cmp.Equal(x, y)
}

func sortedSlice(s []string) []string {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return sortedKeys(m)
}
