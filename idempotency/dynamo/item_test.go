package dynamo_test

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
)

// ignoreAV lets cmp compare attribute values.
var ignoreAV = cmpopts.IgnoreUnexported(
	types.AttributeValueMemberS{}, types.AttributeValueMemberN{}, types.AttributeValueMemberB{},
	types.AttributeValueMemberBOOL{}, types.AttributeValueMemberM{}, types.AttributeValueMemberL{},
	types.AttributeValueMemberNULL{}, types.AttributeValueMemberSS{}, types.AttributeValueMemberNS{},
	types.AttributeValueMemberBS{},
)

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
func b(v []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: v} }
func bl(v bool) types.AttributeValue  { return &types.AttributeValueMemberBOOL{Value: v} }
func m(v map[string]types.AttributeValue) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: v}
}

// fixtureKey is the key of the records in testdata/stream-event.json.
var fixtureKey = idempotency.Key{Tenant: "acme", Hash: "6ab9f1eb8f7d3388f4f9d586f66e99fd54080df2c446f0e58668b09c08a16dd0"}

func TestItemFromRecord(t *testing.T) {
	t0 := time.Date(2040, 1, 2, 3, 4, 5, 678_900_000, time.UTC) // sub-millisecond part is dropped
	key := idempotency.Key{Tenant: "acme", Hash: "ab12"}
	tests := []struct {
		name string
		rec  idempotency.Record
		want map[string]types.AttributeValue
	}{
		{
			name: "in progress external",
			rec: idempotency.Record{
				Key: key, Status: idempotency.StatusInProgress, Route: "POST /v1/charges", Fingerprint: "f00d",
				External: true, LeaseToken: "lease-1", ExpiresAt: t0, Request: []byte(`{"a":1}`),
				CreatedAt: t0.Add(-30 * time.Second), UpdatedAt: t0.Add(-30 * time.Second),
			},
			want: map[string]types.AttributeValue{
				"pk": s("acme#ab12"), "tenant": s("acme"), "status": s("IN_PROGRESS"), "route": s("POST /v1/charges"),
				"fingerprint": s("f00d"), "external": bl(true), "lease_token": s("lease-1"),
				// No TTL attribute: DynamoDB's TTL never deletes an External
				// reservation.
				"expires_at_ms": n("2209086245678"), "request": b([]byte(`{"a":1}`)),
				"created_at": n("2209086215678"), "updated_at": n("2209086215678"),
			},
		},
		{
			name: "unknown",
			rec: idempotency.Record{
				Key: key, Status: idempotency.StatusUnknown, Route: "POST /v1/charges", Fingerprint: "f00d",
				External: true, LeaseToken: "lease-2", ExpiresAt: t0, Request: []byte(`{"a":1}`), Point: "order_created",
				CreatedAt: t0.Add(-30 * time.Second), UpdatedAt: t0.Add(-30 * time.Second), UnknownSince: t0.Add(-time.Minute),
			},
			want: map[string]types.AttributeValue{
				"pk": s("acme#ab12"), "tenant": s("acme"), "status": s("UNKNOWN"), "route": s("POST /v1/charges"),
				"fingerprint": s("f00d"), "external": bl(true), "lease_token": s("lease-2"),
				// No TTL attribute: DynamoDB's TTL never deletes an UNKNOWN record.
				"expires_at_ms": n("2209086245678"), "request": b([]byte(`{"a":1}`)), "point": s("order_created"),
				"created_at": n("2209086215678"), "updated_at": n("2209086215678"), "unknown_since_ms": n("2209086185678"),
			},
		},
		{
			name: "completed",
			rec: idempotency.Record{
				Key: key, Status: idempotency.StatusCompleted, Route: "POST /v1/payments", Fingerprint: "beef",
				ExpiresAt: t0.Truncate(time.Second),
				Response: &idempotency.Response{
					Status: 201,
					Header: map[string]string{"Content-Type": "application/json"},
					Body:   []byte{0xff, 0x00},
				},
				CreatedAt: t0, UpdatedAt: t0,
			},
			want: map[string]types.AttributeValue{
				"pk": s("acme#ab12"), "tenant": s("acme"), "status": s("COMPLETED"), "route": s("POST /v1/payments"),
				"fingerprint": s("beef"), "external": bl(false),
				"expires_at": n("2209086245"), "expires_at_ms": n("2209086245000"),
				"response_status":  n("201"),
				"response_headers": m(map[string]types.AttributeValue{"Content-Type": s("application/json")}),
				"response_body":    b([]byte{0xff, 0x00}),
				"created_at":       n("2209086245678"), "updated_at": n("2209086245678"),
			},
		},
		{
			name: "set-cookie lines",
			rec: idempotency.Record{
				Key: key, Status: idempotency.StatusCompleted, Route: "POST /v1/payments", Fingerprint: "beef",
				ExpiresAt: t0.Truncate(time.Second),
				Response: &idempotency.Response{
					Status:    201,
					Header:    map[string]string{"Link": `</a>; rel="self", </b>; rel="next"`},
					SetCookie: []string{"a=1; Path=/", "b=2; Expires=Wed, 21 Oct 2037 07:28:00 GMT"},
					Body:      []byte(`{}`),
				},
			},
			want: map[string]types.AttributeValue{
				"pk": s("acme#ab12"), "tenant": s("acme"), "status": s("COMPLETED"), "route": s("POST /v1/payments"),
				"fingerprint": s("beef"), "external": bl(false),
				"expires_at": n("2209086245"), "expires_at_ms": n("2209086245000"),
				"response_status":     n("201"),
				"response_headers":    m(map[string]types.AttributeValue{"Link": s(`</a>; rel="self", </b>; rel="next"`)}),
				"response_set_cookie": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("a=1; Path=/"), s("b=2; Expires=Wed, 21 Oct 2037 07:28:00 GMT")}},
				"response_body":       b([]byte(`{}`)),
			},
		},
		{
			name: "empty response, zero times",
			rec: idempotency.Record{
				Key: key, Status: idempotency.StatusCompleted, ExpiresAt: t0,
				Response: &idempotency.Response{Status: 204},
			},
			want: map[string]types.AttributeValue{
				"pk": s("acme#ab12"), "tenant": s("acme"), "status": s("COMPLETED"), "route": s(""),
				"fingerprint": s(""), "external": bl(false),
				"expires_at": n("2209086246"), "expires_at_ms": n("2209086245678"),
				"response_status": n("204"), "response_body": b([]byte{}),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := dynamo.ItemFromRecord(tt.rec)
			if diff := cmp.Diff(tt.want, got, ignoreAV); diff != "" {
				t.Errorf("ItemFromRecord mismatch (-want +got):\n%s", diff)
			}
			back, err := dynamo.RecordFromItem(got)
			if err != nil {
				t.Fatalf("RecordFromItem(ItemFromRecord(rec)) = %v", err)
			}
			want := tt.rec
			want.ExpiresAt = want.ExpiresAt.Truncate(time.Millisecond)
			want.CreatedAt = want.CreatedAt.Truncate(time.Millisecond)
			want.UpdatedAt = want.UpdatedAt.Truncate(time.Millisecond)
			want.UnknownSince = want.UnknownSince.Truncate(time.Millisecond)
			if diff := cmp.Diff(want, back, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("RecordFromItem(ItemFromRecord(rec)) mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecordFromItemErrors(t *testing.T) {
	valid := func() map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			"pk": s("acme#ab12"), "tenant": s("acme"), "status": s("COMPLETED"),
			"external": bl(false), "expires_at_ms": n("2209086245678"),
			"response_status": n("200"), "response_body": b(nil),
		}
	}
	if _, err := dynamo.RecordFromItem(valid()); err != nil {
		t.Fatalf("RecordFromItem(valid) = %v, want nil", err)
	}
	tests := []struct {
		name   string
		change func(map[string]types.AttributeValue)
	}{
		{"no pk", func(i map[string]types.AttributeValue) { delete(i, "pk") }},
		{"pk without tenant", func(i map[string]types.AttributeValue) { i["pk"] = s("ab12") }},
		{"pk of another tenant", func(i map[string]types.AttributeValue) { i["pk"] = s("globex#ab12") }},
		{"no status", func(i map[string]types.AttributeValue) { delete(i, "status") }},
		{"status not a string", func(i map[string]types.AttributeValue) { i["status"] = n("1") }},
		{"no expiry", func(i map[string]types.AttributeValue) { delete(i, "expires_at_ms") }},
		{"expiry not a number", func(i map[string]types.AttributeValue) { i["expires_at_ms"] = n("soon") }},
		{"external not a bool", func(i map[string]types.AttributeValue) { i["external"] = s("true") }},
		{"body not binary", func(i map[string]types.AttributeValue) { i["response_body"] = s("hello") }},
		{"header not a string", func(i map[string]types.AttributeValue) {
			i["response_headers"] = m(map[string]types.AttributeValue{"X": n("1")})
		}},
		{"set-cookie not a list", func(i map[string]types.AttributeValue) { i["response_set_cookie"] = s("a=1") }},
		{"set-cookie line not a string", func(i map[string]types.AttributeValue) {
			i["response_set_cookie"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{s("a=1"), n("2")}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item := valid()
			tt.change(item)
			if rec, err := dynamo.RecordFromItem(item); err == nil {
				t.Errorf("RecordFromItem = %+v, nil, want an error", rec)
			}
		})
	}
}

// TestRecordFromItemChunkedGzip: the item of a record whose gzip-compressed
// answer is in chunk items holds no body: RecordFromItem (a stream
// consumer's decode too) leaves it empty, as documented, rather than
// failing to inflate a body that is not there.
func TestRecordFromItemChunkedGzip(t *testing.T) {
	item := map[string]types.AttributeValue{
		"pk": s("acme#ab12"), "tenant": s("acme"), "status": s("COMPLETED"),
		"external": bl(false), "expires_at_ms": n("2209086245678"), "response_status": n("200"),
		dynamo.AttrResponseEncoding: s("gzip"), dynamo.AttrResponseChunks: n("3"),
		dynamo.AttrResponseChunkID: s("0123456789abcdef"), dynamo.AttrResponseSHA256: s("00"),
	}
	rec, err := dynamo.RecordFromItem(item)
	if err != nil || rec.Response == nil || len(rec.Response.Body) != 0 {
		t.Errorf("RecordFromItem(chunked, gzip) = %+v, %v; want the response without its body", rec.Response, err)
	}
}

func TestStreamImageStatusAbsent(t *testing.T) {
	for name, image := range map[string]map[string]events.DynamoDBAttributeValue{
		"no image":     nil,
		"no status":    {dynamo.AttrPK: events.NewStringAttribute("acme#k")},
		"not a string": {dynamo.AttrStatus: events.NewNumberAttribute("1")},
	} {
		if s := dynamo.StreamImageStatus(image); s != "" {
			t.Errorf("%s: StreamImageStatus = %q, want \"\"", name, s)
		}
	}
}

func TestRecordFromStreamImage(t *testing.T) {
	data, err := os.ReadFile("testdata/stream-event.json")
	if err != nil {
		t.Fatal(err)
	}
	var event events.DynamoDBEvent
	if err := json.Unmarshal(data, &event); err != nil {
		t.Fatal(err)
	}
	at := func(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
	request := []byte(`{"amount":1000,"currency":"usd"}`)
	inProgress := idempotency.Record{
		Key: fixtureKey, Status: idempotency.StatusInProgress, Route: "POST /v1/charges", Fingerprint: "f00d",
		External: true, LeaseToken: "lease-1", ExpiresAt: at(2209086245678), Request: request,
		CreatedAt: at(2209086215678), UpdatedAt: at(2209086215678),
	}
	unknown := inProgress
	unknown.Status = idempotency.StatusUnknown
	unknown.LeaseToken = "lease-2"
	unknown.ExpiresAt = at(2209172645678)
	unknown.UpdatedAt = at(2209086245678)
	unknown.UnknownSince = at(2209086245678)
	completed := unknown
	completed.UnknownSince = time.Time{}
	completed.Status = idempotency.StatusCompleted
	completed.ExpiresAt = at(2209172700000)
	completed.UpdatedAt = at(2209086300000)
	completed.Response = &idempotency.Response{
		Status: 201,
		Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/charges/ch_1"},
		Body:   append([]byte{0xff, 0xfe, 0x00, 0x80}, `{"id":"ch_1"}`...),
	}
	empty := idempotency.Record{
		Key: fixtureKey, Status: idempotency.StatusCompleted, Route: "POST /v1/payments", Fingerprint: "beef",
		ExpiresAt: at(2209172800000), Response: &idempotency.Response{Status: 204, Body: []byte{}},
	}
	tests := []struct {
		name  string
		image map[string]events.DynamoDBAttributeValue
		want  idempotency.Record
	}{
		{"old in progress", event.Records[0].Change.OldImage, inProgress},
		{"new unknown", event.Records[0].Change.NewImage, unknown},
		{"new completed", event.Records[1].Change.NewImage, completed},
		{"new completed, empty body", event.Records[2].Change.NewImage, empty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := dynamo.RecordFromStreamImage(tt.image)
			if err != nil {
				t.Fatalf("RecordFromStreamImage = %v", err)
			}
			if s := dynamo.StreamImageStatus(tt.image); s != tt.want.Status {
				t.Errorf("StreamImageStatus = %q, want %q", s, tt.want.Status)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("RecordFromStreamImage mismatch (-want +got):\n%s", diff)
			}
			// The stream image and the SDK item agree.
			back, err := dynamo.RecordFromItem(dynamo.ItemFromRecord(got))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, back); diff != "" {
				t.Errorf("RecordFromItem(ItemFromRecord(image record)) mismatch (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("zero binary value", func(t *testing.T) {
		image := map[string]events.DynamoDBAttributeValue{
			"pk":              events.NewStringAttribute(fixtureKey.ID()),
			"status":          events.NewStringAttribute("COMPLETED"),
			"expires_at_ms":   events.NewNumberAttribute("2209172800000"),
			"response_status": events.NewNumberAttribute("200"),
			"response_body":   {}, // the zero value, which aws-lambda-go types as binary with no value
		}
		got, err := dynamo.RecordFromStreamImage(image)
		if err != nil {
			t.Fatalf("RecordFromStreamImage = %v", err)
		}
		if got.Response == nil || got.Response.Body == nil || len(got.Response.Body) != 0 {
			t.Errorf("Response = %+v, want an empty, non-nil body", got.Response)
		}
	})
}
