package events_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/abandoned"
	"github.com/oncehq/once/internal/audit"
)

// runAuditorScheduled seeds UNKNOWN records whose check is lost and others
// whose check is armed, feeds the scheduled event to the auditor, and
// checks that it counted exactly the lost ones in the segment of the
// event's time (a Scan of that segment, unfiltered, says which they are):
// abandoned_records and audit_incomplete 0.
func runAuditorScheduled(t *testing.T, s *stack, file string) {
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(readFile(t, file), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" || ev.Time.IsZero() {
		t.Fatalf("%s: %+v, want a scheduled event with its time", file, ev)
	}
	table := s.names.ByLogicalID["IdempotencyTable"]
	now := time.Now()
	lost := map[string]bool{}
	for i := range 240 { // 120 lost: some in each of the 23 segments
		rec := idempotency.Record{
			Key: idempotency.NewKey("acme", fmt.Sprintf("charge-%d", i)), Status: idempotency.StatusUnknown, Route: "POST /v1/charges",
			Fingerprint: "f00d", External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(time.Hour),
			CreatedAt: now.Add(-48 * time.Hour), UpdatedAt: now.Add(-48 * time.Hour),
		}
		if i%2 == 0 {
			rec.ExpiresAt = now.Add(-abandoned.LostCheckAfter - time.Minute)
			lost[rec.Key.ID()] = true
		}
		if _, err := s.client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: dynamo.ItemFromRecord(rec)}); err != nil {
			t.Fatal(err)
		}
	}
	// 10:05 UTC on 2026-11-25 (audit.Schedule runs at minute 5), 498778
	// hours since the epoch: segment 0 of 23, as the README's table of
	// events says.
	segment := audit.Segment(ev.Time, audit.Segments)
	if segment != 0 || audit.Segments != 23 {
		t.Errorf("%s: segment %d of %d, want 0 of 23 (the README's events table)", file, segment, audit.Segments)
	}
	out, err := s.client.Scan(t.Context(), &dynamodb.ScanInput{
		TableName: aws.String(table), Segment: aws.Int32(int32(segment)), TotalSegments: aws.Int32(audit.Segments),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, item := range out.Items {
		if rec, err := dynamo.RecordFromItem(item); err == nil && lost[rec.Key.ID()] {
			want++
		}
	}
	if want == 0 {
		t.Fatalf("no lost record in segment %d: seed more", segment)
	}
	if _, err := s.invoke(t, auditorFunction, file); err != nil {
		t.Fatalf("auditor: %v", err)
	}
	checkMetrics(t, s, auditorFunction, []string{fmt.Sprintf(`"abandoned_records":%d}`, want), `"audit_incomplete":0}`}, nil)
	if n := strings.Count(s.metrics[auditorFunction].String(), "\n"); n != 2 {
		t.Errorf("the auditor wrote %d metric lines, want 2", n)
	}
}
