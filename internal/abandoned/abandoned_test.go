package abandoned_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/abandoned"
)

// TestClassification: each kind of record the Scan filter reads, as the
// DynamoDB store writes it (a legacy item with the TTL attribute it had
// before the upgrade), is listed by oncectl unknown, re-armed by reannounce
// -lost (Abandoned) and counted by the auditor (Stuck) as recovery leaves
// it: an UNKNOWN record whose check is armed is listed only; a reservation
// within its lease, or just past it with its check on its way, is none of
// them; nor is a reservation past LostCheckAfter but written within the
// sweeper's stream retries and the margin (its check may still be armed).
func TestClassification(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	lost := abandoned.LostCheckAfter + time.Minute
	tests := []struct {
		name                     string
		status                   idempotency.Status
		external                 bool
		expires                  time.Duration // from now
		legacy                   bool          // the item carries the TTL attribute
		written                  time.Duration // UpdatedAt from now; 48 hours ago when 0
		listed, abandoned, stuck bool
		kind                     string
	}{
		{name: "UNKNOWN, check armed", status: idempotency.StatusUnknown, external: true, expires: time.Hour, listed: true},
		{name: "UNKNOWN, just expired, check on its way", status: idempotency.StatusUnknown, external: true, expires: -time.Minute, listed: true},
		{name: "UNKNOWN, check lost", status: idempotency.StatusUnknown, external: true, expires: -lost, listed: true, abandoned: true, stuck: true, kind: abandoned.KindLost},
		{name: "UNKNOWN legacy", status: idempotency.StatusUnknown, external: true, expires: time.Hour, legacy: true, listed: true, abandoned: true, stuck: true, kind: abandoned.KindLegacy},
		{name: "External reservation, check lost", status: idempotency.StatusInProgress, external: true, expires: -lost, listed: true, abandoned: true, stuck: true, kind: abandoned.KindLost},
		{name: "External reservation, lease just run out", status: idempotency.StatusInProgress, external: true, expires: -time.Minute},
		{name: "External legacy, lease run out an hour ago", status: idempotency.StatusInProgress, external: true, expires: -time.Hour, legacy: true, listed: true, abandoned: true, stuck: true, kind: abandoned.KindLegacy},
		{name: "External legacy, lease just run out", status: idempotency.StatusInProgress, external: true, expires: -time.Minute, legacy: true, listed: true, abandoned: true},
		{name: "External legacy, check lost", status: idempotency.StatusInProgress, external: true, expires: -lost, legacy: true, listed: true, abandoned: true, stuck: true, kind: abandoned.KindLegacy},
		// Past LostCheckAfter, but the Scheduler's stream record of its
		// write may still be retried (for an hour) and arm its check.
		{name: "External reservation, lease + 31 min, written 40 min ago", status: idempotency.StatusInProgress, external: true, expires: -31 * time.Minute, written: -40 * time.Minute, listed: true, abandoned: true},
		{name: "External reservation, lease + 31 min, written 1h14m ago", status: idempotency.StatusInProgress, external: true, expires: -31 * time.Minute, written: -74 * time.Minute, listed: true, abandoned: true},
		{name: "External reservation, lease + 31 min, written 1h16m ago", status: idempotency.StatusInProgress, external: true, expires: -31 * time.Minute, written: -76 * time.Minute, listed: true, abandoned: true, stuck: true, kind: abandoned.KindLost},
		// A legacy reservation waits as long as a new one: its check, if
		// armed, comes as late.
		{name: "External legacy, lease run out 20 min ago", status: idempotency.StatusInProgress, external: true, expires: -20 * time.Minute, legacy: true, listed: true, abandoned: true},
		{name: "External legacy, lease + 31 min, written 40 min ago", status: idempotency.StatusInProgress, external: true, expires: -31 * time.Minute, written: -40 * time.Minute, legacy: true, listed: true, abandoned: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			written := tt.written
			if written == 0 {
				written = -48 * time.Hour
			}
			rec := idempotency.Record{
				Key: idempotency.NewKey("acme", tt.name), Status: tt.status, Route: "POST /v1/charges", Fingerprint: "f00d",
				External: tt.external, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(tt.expires),
				CreatedAt: now.Add(-48 * time.Hour), UpdatedAt: now.Add(written),
			}
			item := dynamo.ItemFromRecord(rec)
			if _, ok := item[dynamo.AttrExpiresAt]; ok {
				t.Fatalf("the store writes %s with the TTL attribute", tt.name)
			}
			if tt.legacy {
				item[dynamo.AttrExpiresAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(rec.ExpiresAt.Add(24*time.Hour).Unix(), 10)}
			}
			got, listed, err := abandoned.FromItem(item, now)
			if err != nil {
				t.Fatal(err)
			}
			if listed != tt.listed || got.Abandoned(now) != tt.abandoned || got.Stuck(now) != tt.stuck {
				t.Errorf("listed %t, Abandoned %t, Stuck %t; want %t, %t, %t", listed, got.Abandoned(now), got.Stuck(now), tt.listed, tt.abandoned, tt.stuck)
			}
			// What the auditor counts, oncectl unknown lists and
			// reannounce -lost re-arms: else its alarm would stay up
			// over a record the runbook cannot see or clear.
			if got.Stuck(now) && !(listed && got.Abandoned(now)) {
				t.Errorf("Stuck but listed %t, Abandoned %t; want both", listed, got.Abandoned(now))
			}
			if tt.stuck && got.Kind() != tt.kind {
				t.Errorf("Kind() = %q, want %q", got.Kind(), tt.kind)
			}
			if got.Key != rec.Key || got.LegacyTTL != tt.legacy {
				t.Errorf("FromItem = %s legacy %t, want %s legacy %t", got.Key.ID(), got.LegacyTTL, rec.Key.ID(), tt.legacy)
			}
		})
	}
}

// TestFromItemError: an item that is no record is an error naming its key.
func TestFromItemError(t *testing.T) {
	item := map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: "acme#x"}}
	if _, _, err := abandoned.FromItem(item, time.Now()); err == nil || !strings.Contains(err.Error(), "acme#x") {
		t.Errorf("FromItem(no record) error = %v, want one naming acme#x", err)
	}
}

// TestFromItemNotListed: an item that is not what Filter reads (a
// COMPLETED record, long expired) decodes, and is not listed.
func TestFromItemNotListed(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	rec := idempotency.Record{
		Key: idempotency.NewKey("acme", "done"), Status: idempotency.StatusCompleted, Route: "POST /v1/charges", Fingerprint: "f00d",
		External: true, ExpiresAt: now.Add(-48 * time.Hour), CreatedAt: now.Add(-72 * time.Hour), UpdatedAt: now.Add(-72 * time.Hour),
		Response: &idempotency.Response{Status: 201, Body: []byte(`{}`)},
	}
	got, listed, err := abandoned.FromItem(dynamo.ItemFromRecord(rec), now)
	if err != nil || listed || got.Key != rec.Key || got.Status != idempotency.StatusCompleted {
		t.Errorf("FromItem(COMPLETED) = %s %s, listed %t, %v; want %s COMPLETED, not listed, no error", got.Key.ID(), got.Status, listed, err, rec.Key.ID())
	}
}

// TestMaxDelay: the copy of recovery.MaxDelay, kept so that the auditor's
// binary does not link the recovery package, is the same.
func TestMaxDelay(t *testing.T) {
	if abandoned.MaxDelay != recovery.MaxDelay {
		t.Errorf("abandoned.MaxDelay = %v, want recovery.MaxDelay (%v)", abandoned.MaxDelay, recovery.MaxDelay)
	}
}
