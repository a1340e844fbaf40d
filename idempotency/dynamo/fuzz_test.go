package dynamo_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/stream"
)

// FuzzRecordItem checks the stored-response encoding: any record the engine
// writes comes back from its item (and from a stream image of the item)
// exactly, body bytes, headers, recovery point and data included, whether
// the body is stored as it is or compressed.
func FuzzRecordItem(f *testing.F) {
	f.Add("COMPLETED", 201, "Content-Type", "application/json", []byte(`{"id":"pay_1"}`), "", "", "")
	f.Add("COMPLETED", 402, "Retry-After", "1", bytes.Repeat([]byte(`{"a":"b"},`), 1000), "charge_created", "charge", "ch_1")
	f.Add("IN_PROGRESS", 0, "", "", []byte(nil), "order_created", "order", "ord_1")
	f.Add("UNKNOWN", 0, "", "", []byte{0, 0xff, 0}, "", "", "")
	f.Fuzz(func(t *testing.T, status string, code int, hk, hv string, body []byte, point, dk, dv string) {
		rec := idempotency.Record{
			Key:         idempotency.NewKey("acme", "k"),
			Status:      idempotency.Status(status),
			Route:       "POST /v1/x",
			Fingerprint: "f",
			LeaseToken:  "lease",
			ExpiresAt:   time.UnixMilli(2_000_000_000_123).UTC(),
			Point:       point,
			CreatedAt:   time.UnixMilli(1_900_000_000_456).UTC(),
			UpdatedAt:   time.UnixMilli(1_900_000_001_789).UTC(),
		}
		if status == "" {
			return // required by the layout
		}
		if rec.Status == idempotency.StatusUnknown {
			rec.UnknownSince = time.UnixMilli(1_900_000_000_999).UTC() // kept on UNKNOWN records only
		}
		if dk != "" {
			rec.Data = map[string]string{dk: dv}
		}
		if code != 0 {
			rec.Response = &idempotency.Response{Status: code, Body: body}
			if body == nil {
				rec.Response.Body = []byte{}
			}
			if hk != "" {
				rec.Response.Header = map[string]string{hk: hv}
			}
		}
		item := dynamo.ItemFromRecord(rec)
		got, err := dynamo.RecordFromItem(item)
		if err != nil {
			t.Fatalf("RecordFromItem(ItemFromRecord(%+v)) = %v", rec, err)
		}
		if diff := cmp.Diff(rec, got); diff != "" {
			t.Fatalf("item round trip (-want +got):\n%s", diff)
		}
		fromImage, err := dynamo.RecordFromStreamImage(stream.FromSDK(item))
		if err != nil {
			t.Fatalf("RecordFromStreamImage: %v", err)
		}
		if diff := cmp.Diff(rec, fromImage); diff != "" {
			t.Fatalf("stream image round trip (-want +got):\n%s", diff)
		}
	})
}

// FuzzStreamImage feeds arbitrary stream images (as Lambda delivers them,
// in JSON) to the stream handlers' decoder: it never panics, and a record it
// decodes encodes back to an item it decodes to the same record.
func FuzzStreamImage(f *testing.F) {
	f.Add([]byte(`{"pk":{"S":"acme#ab"},"status":{"S":"UNKNOWN"},"expires_at_ms":{"N":"1"},"external":{"BOOL":true}}`))
	f.Add([]byte(`{"pk":{"S":"acme#ab"},"status":{"S":"COMPLETED"},"expires_at_ms":{"N":"9"},"response_status":{"N":"201"},"response_body":{"B":"eyJhIjoxfQ=="}}`))
	f.Add([]byte(`{"pk":{"S":"#"},"status":{"N":"1"}}`))
	f.Add([]byte(`{"pk":{"S":"a#b"},"status":{"S":"X"},"expires_at_ms":{"N":"1e3"},"data":{"M":{"k":{"N":"1"}}}}`))
	f.Add([]byte(`{"pk":{"S":"a#b"},"status":{"S":"COMPLETED"},"expires_at_ms":{"N":"1"},"response_status":{"N":"200"},"response_body":{"B":"AAAA"},"response_encoding":{"S":"gzip"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var image map[string]events.DynamoDBAttributeValue
		if json.Unmarshal(data, &image) != nil {
			return
		}
		_ = dynamo.StreamImageStatus(image)
		rec, err := dynamo.RecordFromStreamImage(image)
		if err != nil {
			return
		}
		again, err := dynamo.RecordFromItem(dynamo.ItemFromRecord(rec))
		if err != nil {
			t.Fatalf("a decoded record does not survive its own encoding: %v (%+v)", err, rec)
		}
		if diff := cmp.Diff(rec, again); diff != "" {
			t.Fatalf("re-encoding a decoded record (-want +got):\n%s", diff)
		}
	})
}
